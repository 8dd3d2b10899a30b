#!/usr/bin/env python3
"""PyTorch eager baseline for bench_layers: the same attention and MLP sublayers (pre-norm,
RoPE, causal GQA softmax attention, gelu/swiglu MLP), float32 on the CPU, median time of a
training forward and its backward (input and weight gradients), and the fastest forward + backward.
Its fastest formulation where the torch running it has one: F.scaled_dot_product_attention with
the causal flag and F.rms_norm (PyTorch 2.x); otherwise (Debian's 1.13) the softmax written out.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_layers.py [--batch 4] [--seq 256] [--hidden 256]
      [--heads 4] [--groups 4] [--ffn 1024] [--activation gelu|swiglu] [--threads 2] [--iters 20]
      [--pool torch|openblas]   (--pool openblas: OPENBLAS_NUM_THREADS=--threads; torch_timing.py)
"""
import argparse
import math

import torch
import torch.nn.functional as F

from torch_timing import add_pool_argument, median, prepare_threads, time_forward_backward

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
HAVE_RMS_NORM = hasattr(F, "rms_norm")


def rms(x, w, eps=1e-5):
    if HAVE_RMS_NORM:
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, base=10000.0):
    s, hd = x.shape[1], x.shape[-1]
    inv = base ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2.0 / hd)
    angle = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
    cos = angle.cos().to(x.dtype)[None, :, None, :]
    sin = angle.sin().to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(x, w, wqkv, wproj, nh, ng):
    b, s, c = x.shape
    hd, per = c // nh, nh // ng
    qkv = (rms(x, w) @ wqkv.T).view(b, s, ng, per + 2, hd)
    q = rope(qkv[:, :, :, :per, :].reshape(b, s, nh, hd))
    k = rope(qkv[:, :, :, per, :])
    v = qkv[:, :, :, per + 1, :]
    k = k.repeat_interleave(per, dim=2)
    v = v.repeat_interleave(per, dim=2)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [b, h, s, hd]
    if HAVE_SDPA:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        o = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
    o = o.transpose(1, 2).reshape(b, s, nh * hd)
    return o @ wproj.T


def mlp(x, w, w1, w2, activation, f):
    a = rms(x, w) @ w1.T
    act = F.silu(a[..., :f]) * a[..., f:] if activation == "swiglu" else F.gelu(a)
    return act @ w2.T


def bench(name, fn, params, x, iters):
    dy = torch.randn_like(x)
    fwd, bwd = time_forward_backward(fn, params + [x], dy, iters)
    fm, bm = median(fwd), median(bwd)
    best = min(f + b for f, b in zip(fwd, bwd))
    print(f"torch {name:<16} fwd {fm:7.2f} ms  bwd {bm:7.2f} ms  fwd+bwd median {fm + bm:7.2f} ms  min {best:7.2f} ms")


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(batch=4, seq=256, hidden=256, heads=4, groups=4, ffn=1024, threads=2, iters=20).items():
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--activation", default="gelu")
    add_pool_argument(ap)
    a = ap.parse_args()
    prepare_threads("torch_layers.py", a.threads, a.pool)
    c, nh, ng, hd = a.hidden, a.heads, a.groups, a.hidden // a.heads
    x = torch.randn(a.batch, a.seq, c, requires_grad=True)
    wn = torch.ones(c, requires_grad=True)
    wqkv = (torch.randn((nh + 2 * ng) * hd, c) * 0.02).requires_grad_()
    wproj = (torch.randn(c, nh * hd) * 0.02).requires_grad_()
    f1 = 2 * a.ffn if a.activation == "swiglu" else a.ffn
    w1 = (torch.randn(f1, c) * 0.02).requires_grad_()
    w2 = (torch.randn(c, a.ffn) * 0.02).requires_grad_()
    print(f"torch {torch.__version__}, {a.threads} threads in {a.pool}'s pool; B={a.batch} S={a.seq} C={c} nh={nh} "
          f"ng={ng} F={a.ffn} {a.activation} RMSNorm f32, {'sdpa causal' if HAVE_SDPA else 'softmax written out'}")
    bench("attention", lambda: attention(x, wn, wqkv, wproj, nh, ng), [wn, wqkv, wproj], x, a.iters)
    bench("mlp", lambda: mlp(x, wn, w1, w2, a.activation, a.ffn), [wn, w1, w2], x, a.iters)


if __name__ == "__main__":
    main()

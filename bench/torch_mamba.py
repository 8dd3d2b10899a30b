#!/usr/bin/env python3
"""PyTorch eager baseline for bench_mamba: the same Mamba-2 layer (pre-norm, in_proj, causal
depthwise conv + SiLU, softplus, the minimal chunked SSD, D skip, z-gate, grouped RMSNorm,
out_proj) as tests/reference/mamba2_reference.py computes it, written for speed where PyTorch
1.13 has a slow path (the depthwise convolution on a contiguous layout, B and C expanded as
views) and checked against the reference before timing; float32 on the CPU; median time of a
training forward and of the backward that follows (input and every parameter gradient), and the
fastest forward + backward.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_mamba.py [--batch 4] [--seq 1024]
      [--d-model 256] [--expand 2] [--head-dim 64] [--state-dim 128] [--groups 8] [--chunk 128]
      [--threads 2] [--iters 10] [--pool torch|openblas]
  OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/torch_mamba.py --threads 2 --pool openblas

Subnormal floats are flushed to zero (torch.set_flush_denormal), as plexus-train and bench_mamba
do. Threads: one pool of --threads threads (bench/torch_timing.py). --pool torch (default): PyTorch's
own, with OPENBLAS_NUM_THREADS=1 so that the OpenBLAS Debian's PyTorch calls for matrix products
starts no second pool on the same cores. --pool openblas: OpenBLAS's, OPENBLAS_NUM_THREADS equal
to --threads and PyTorch's pool one thread; Debian's PyTorch parallelizes a matrix product only
through OpenBLAS, so for work made of products this is its faster configuration. The script
refuses a mismatched OPENBLAS_NUM_THREADS. Measure both and compare against the faster.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import mamba2_reference as ref  # noqa: E402
from torch_timing import (add_compile_argument, add_pool_argument, compiled, median,  # noqa: E402
                          prepare_threads, time_forward_backward)


def causal_conv_silu(xbc, weight, bias):
    """The depthwise causal convolution through F.conv1d on a contiguous [b, channels, l] copy:
    PyTorch 1.13's CPU convolution takes a slow generic path for the transposed (non-contiguous)
    view the reference passes, about 4x slower here, its backward most of all."""
    width, length = weight.shape[-1], xbc.shape[1]
    conv = F.conv1d(xbc.transpose(1, 2).contiguous(), weight, bias, padding=width - 1, groups=xbc.shape[-1])
    return F.silu(conv[..., :length]).transpose(1, 2)


def mamba_layer(h, p, case):
    """tests/reference/mamba2_reference.py's layer (chunked SSD) as one would write it for speed:
    the convolution on a contiguous layout and B, C expanded to heads as views."""
    d_inner, heads, headdim = case["d_inner"], case["nheads"], case["headdim"]
    groups, state = case["ngroups"], case["d_state"]
    b, l, _ = h.shape
    zxbcdt = ref.pre_norm(h, p, case) @ p["mixer.in_proj.weight"].T
    z, xbc, dt_raw = torch.split(zxbcdt, [d_inner, d_inner + 2 * groups * state, heads], dim=-1)
    xbc = causal_conv_silu(xbc, p["mixer.conv1d.weight"], p["mixer.conv1d.bias"])
    x, B, C = torch.split(xbc, [d_inner, groups * state, groups * state], dim=-1)
    per_group = heads // groups
    B = B.reshape(b, l, groups, 1, state).expand(b, l, groups, per_group, state).reshape(b, l, heads, state)
    C = C.reshape(b, l, groups, 1, state).expand(b, l, groups, per_group, state).reshape(b, l, heads, state)
    dt = F.softplus(dt_raw + p["mixer.dt_bias"], beta=1.0, threshold=20.0)
    x = x.reshape(b, l, heads, headdim)
    y = ref.ssd("chunked", x, dt, -torch.exp(p["mixer.A_log"]), B, C, case["chunk_size"])
    y = y + p["mixer.D"][:, None] * x
    g = (y.reshape(b, l, d_inner) * F.silu(z)).reshape(b, l, groups, d_inner // groups)
    o = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + case["norm_epsilon"])).reshape(b, l, d_inner)
    return (o * p["mixer.norm.weight"]) @ p["mixer.out_proj.weight"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for k, v in dict(batch=4, seq=1024, d_model=256, expand=2, head_dim=64, state_dim=128, groups=8,
                     conv=4, chunk=128, threads=2, iters=10).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    add_pool_argument(ap)
    add_compile_argument(ap)
    a = ap.parse_args()
    # Subnormal floats count as zero, as in plexus-train (run.flush_denormals): the decays of the
    # chunked scan underflow, and arithmetic on subnormals costs a hundred cycles on either side.
    prepare_threads("torch_mamba.py", a.threads, a.pool)
    d_inner = a.expand * a.d_model
    heads = d_inner // a.head_dim
    conv_dim = d_inner + 2 * a.groups * a.state_dim
    case = dict(d_inner=d_inner, nheads=heads, headdim=a.head_dim, ngroups=a.groups, d_state=a.state_dim,
                d_conv=a.conv, chunk_size=a.chunk, normalization="RMSNorm", layernorm_epsilon=1e-5,
                norm_epsilon=1e-5)
    # Megatron's initialization (plugins/mamba/README.md), so values stay in their training range.
    dt = torch.exp(torch.rand(heads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
    params = {
        "norm.weight": torch.ones(a.d_model),
        "mixer.in_proj.weight": torch.randn(2 * d_inner + 2 * a.groups * a.state_dim + heads, a.d_model) * 0.02,
        "mixer.conv1d.weight": (torch.rand(conv_dim, 1, a.conv) * 2 - 1) / math.sqrt(a.conv),
        "mixer.conv1d.bias": (torch.rand(conv_dim) * 2 - 1) / math.sqrt(a.conv),
        "mixer.dt_bias": dt + torch.log(-torch.expm1(-dt)),
        "mixer.A_log": torch.log(torch.rand(heads) * 15 + 1),
        "mixer.D": torch.ones(heads),
        "mixer.norm.weight": torch.ones(d_inner),
        "mixer.out_proj.weight": torch.randn(a.d_model, d_inner) * 0.02 / 2,
    }
    params = {k: v.requires_grad_(True) for k, v in params.items()}
    x = torch.randn(a.batch, a.seq, a.d_model, requires_grad=True)
    dy = torch.randn(a.batch, a.seq, a.d_model)

    # The formulation timed here is the reference's math: check it on a short slice first.
    with torch.no_grad():
        short = x[:, :min(a.seq, 2 * a.chunk + 5)]
        expected = ref.mamba_layer(short, params, case, "chunked")
        got = mamba_layer(short, params, case)
        err = ((got - expected).abs().max() / expected.abs().max()).item()
    if not err < 1e-5:
        sys.exit(f"torch_mamba.py: the timed formulation differs from the reference by {err:.2e}")

    layer = compiled("torch_mamba.py", mamba_layer, a.compile)
    fwd, bwd = time_forward_backward(lambda: layer(x, params, case), list(params.values()) + [x], dy, a.iters)
    fm, bm = median(fwd), median(bwd)
    best = min(f + b for f, b in zip(fwd, bwd))
    print(f"PyTorch {torch.__version__} {'compile' if a.compile else 'eager'}, {a.threads} threads ({a.pool}'s pool), B={a.batch} L={a.seq} d_model={a.d_model} "
          f"d_inner={d_inner} H={heads} P={a.head_dim} N={a.state_dim} G={a.groups} W={a.conv} Q={a.chunk} f32")
    print(f"torch mamba fwd {fm:8.2f} ms  bwd {bm:8.2f} ms  fwd+bwd median {fm + bm:8.2f} ms  min {best:8.2f} ms")


if __name__ == "__main__":
    main()

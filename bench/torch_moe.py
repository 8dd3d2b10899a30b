#!/usr/bin/env python3
"""PyTorch eager baseline for bench_moe: the same MoE sublayer (RMSNorm pre-norm, router, top-k
with softmax over the k selected logits, the experts as gelu or swiglu MLPs, the weighted sum of
each token's k outputs), float32 on the CPU, dropless, no auxiliary losses, every expert in this
process; median time of a training forward and of the backward that follows (input and every
parameter gradient), and the fastest forward + backward.

Written as one would write it for speed in eager PyTorch, the form Megatron-LM's
SequentialMLP takes: the (token, choice) pairs sorted by expert once (argsort of the chosen
experts), the rows gathered in that order, one pair of matrix products per expert over its
contiguous block of rows, the outputs scaled by their probabilities and added back to their
tokens with index_add_; not a loop that multiplies every token by every expert under a mask.
Checked against tests/reference/moe_reference.py (the layer's contract) before timing.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_moe.py [--batch 4] [--seq 1024]
      [--hidden 256] [--ffn 1024] [--experts 8] [--topk 2] [--activation gelu|swiglu]
      [--threads 2] [--iters 10] [--pool torch|openblas]
  OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/torch_moe.py --threads 2 --pool openblas

Threads: one pool of --threads threads (bench/torch_timing.py). --pool torch (default): PyTorch's
own, with OPENBLAS_NUM_THREADS=1 so that the OpenBLAS Debian's PyTorch calls for matrix products
starts no second pool on the same cores. --pool openblas: OpenBLAS's, OPENBLAS_NUM_THREADS equal
to --threads and PyTorch's pool one thread; Debian's PyTorch parallelizes a matrix product only
through OpenBLAS, so for work made of products this is its faster configuration. The script
refuses a mismatched OPENBLAS_NUM_THREADS. Measure both and compare against the faster.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import moe_reference as ref  # noqa: E402
from torch_timing import (add_compile_argument, add_pool_argument, compiled, median,  # noqa: E402
                          prepare_threads, time_forward_backward)


def moe_layer(h, p, case):
    """Tokens sorted by expert, one fc1/fc2 pair per expert over its block of rows."""
    experts, k = case["experts"], case["topk"]
    b, l, c = h.shape
    x = h.reshape(b * l, c)
    u = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + case["layernorm_epsilon"]) * p["pre_mlp_layernorm.weight"]
    z = u @ p["mlp.router.weight"].T
    top, chosen = torch.topk(z, k, dim=-1)
    probs = torch.softmax(top, dim=-1)
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token_of = order // k  # the token of each sorted (token, choice) pair
    counts = torch.bincount(flat, minlength=experts).tolist()
    rows = u.index_select(0, token_of)
    outputs = []
    start = 0
    for e in range(experts):
        block = rows[start:start + counts[e]]
        start += counts[e]
        prefix = f"mlp.experts.local_experts.{e}."
        a = block @ p[prefix + "linear_fc1.weight"].T
        if case["activation"] == "swiglu":
            gate, up = a.chunk(2, dim=-1)
            act = F.silu(gate) * up
        else:
            act = F.gelu(a)
        outputs.append(act @ p[prefix + "linear_fc2.weight"].T)
    y = torch.cat(outputs) * probs.reshape(-1).index_select(0, order).unsqueeze(1)
    out = torch.zeros_like(x).index_add_(0, token_of, y)
    return out.reshape(b, l, c)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for key, v in dict(batch=4, seq=1024, hidden=256, ffn=1024, experts=8, topk=2, threads=2, iters=10).items():
        ap.add_argument("--" + key.replace("_", "-"), type=int, default=v)
    ap.add_argument("--activation", choices=["gelu", "swiglu"], default="gelu")
    add_pool_argument(ap)
    add_compile_argument(ap)
    a = ap.parse_args()
    prepare_threads("torch_moe.py", a.threads, a.pool)
    case = dict(experts=a.experts, topk=a.topk, normalization="RMSNorm", layernorm_epsilon=1e-5,
                activation=a.activation, score="softmax", pre_softmax=False, aux_loss_coeff=0.0,
                z_loss_coeff=0.0, capacity_factor=0, drop_policy="probs", shared=False, num_groups=0,
                group_topk=0)
    fc1_rows = 2 * a.ffn if a.activation == "swiglu" else a.ffn
    # Megatron's initialization, as the host gives bench_moe (linear_fc2 scaled for 4 layers).
    params = {"pre_mlp_layernorm.weight": torch.ones(a.hidden),
              "mlp.router.weight": torch.randn(a.experts, a.hidden) * 0.02}
    for e in range(a.experts):
        params[f"mlp.experts.local_experts.{e}.linear_fc1.weight"] = torch.randn(fc1_rows, a.hidden) * 0.02
        params[f"mlp.experts.local_experts.{e}.linear_fc2.weight"] = torch.randn(a.hidden, a.ffn) * 0.02 / 8 ** 0.5
    params = {key: v.requires_grad_(True) for key, v in params.items()}
    x = torch.randn(a.batch, a.seq, a.hidden, requires_grad=True)
    dy = torch.randn(a.batch, a.seq, a.hidden)

    # The formulation timed here is the layer's contract: check it on a slice first (float64).
    with torch.no_grad():
        short = x[:1, :256].double()
        p64 = {key: v.double() for key, v in params.items()}
        expected = ref.moe_layer(short, p64, case)[0]
        got = moe_layer(short, p64, case)
        err = ((got - expected).abs().max() / expected.abs().max()).item()
    if not err < 1e-10:
        sys.exit(f"torch_moe.py: the timed formulation differs from the reference by {err:.2e}")

    layer = compiled("torch_moe.py", moe_layer, a.compile)
    fwd, bwd = time_forward_backward(lambda: layer(x, params, case), list(params.values()) + [x], dy, a.iters)
    total = sorted(f + b for f, b in zip(fwd, bwd))
    fm, bm = median(fwd), median(bwd)
    print(f"PyTorch {torch.__version__} {'compile' if a.compile else 'eager'}, {a.threads} threads ({a.pool}'s pool), T={a.batch * a.seq} (B={a.batch} L={a.seq}) "
          f"C={a.hidden} F={a.ffn} E={a.experts} k={a.topk} {a.activation} f32")
    print(f"torch moe fwd {fm:8.2f} ms  bwd {bm:8.2f} ms  fwd+bwd median {total[len(total) // 2]:8.2f} ms  "
          f"min {total[0]:8.2f} ms")


if __name__ == "__main__":
    main()

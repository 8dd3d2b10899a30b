#!/usr/bin/env python3
"""The matrix products of one GPT training step, timed alone in whatever PyTorch runs this script:
how fast the BLAS under it multiplies at the model's own shapes, apart from everything else.

For a layer (C, FFN, tokens T = micro-batch x sequence) and the head (vocabulary V), every product
of forward and backward: y = x W^T (nt), dx = dy W (nn) and dW = dy^T x (tn), for the fused QKV
projection, the attention output projection, the two MLP products and the head. Attention's own
S x S products (per head, a small part of the step) are left out. Each
shape's median of --reps runs; the summary is the step's product FLOPs over the sum of the
medians, with the layers' products counted --layers times.

Run it with each BLAS of interest, in its faster thread pool (bench/torch_timing.py's --pool):
  OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/gemm_shapes.py --threads 2 --pool openblas  # Debian: OpenBLAS
  OPENBLAS_NUM_THREADS=1 .venv-bench/bin/python bench/gemm_shapes.py --threads 2           # PyPI: MKL
"""
import argparse

import torch

from torch_timing import add_pool_argument, median_ms, prepare_threads


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=0, help="0: 4 x hidden")
    ap.add_argument("--tokens", type=int, default=1024, help="micro-batch x sequence length")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=25)
    add_pool_argument(ap)
    args = ap.parse_args()
    prepare_threads("gemm_shapes.py", args.threads, args.pool)
    c, t, v = args.hidden, args.tokens, args.vocab
    f = args.ffn or 4 * c
    # (name, out features, in features, count per step)
    weights = [("qkv", 3 * c, c, args.layers), ("proj", c, c, args.layers), ("fc1", f, c, args.layers),
               ("fc2", c, f, args.layers), ("head", v, c, 1)]
    print(f"torch {torch.__version__}, {args.threads} threads in {args.pool}'s pool "
          f"(BLAS: {'MKL' if torch.backends.mkl.is_available() else 'not MKL'}); "
          f"T={t} C={c} FFN={f} V={v}, {args.layers} layers; median of {args.reps} runs")
    print(f"{'product':<10} {'shape (m x n x k)':>20} {'ms':>8} {'GFLOP/s':>9}")
    total_flops = total_seconds = 0.0
    for name, out_f, in_f, count in weights:
        x, w, dy = torch.randn(t, in_f), torch.randn(out_f, in_f), torch.randn(t, out_f)
        products = {
            "fwd nt": ((t, out_f, in_f), lambda: torch.mm(x, w.t())),
            "dx nn": ((t, in_f, out_f), lambda: torch.mm(dy, w)),
            "dW tn": ((out_f, in_f, t), lambda: torch.mm(dy.t(), x)),
        }
        for kind, ((m, n, k), fn) in products.items():
            seconds = median_ms(fn, args.reps) / 1e3
            flops = 2.0 * m * n * k
            total_flops += flops * count
            total_seconds += seconds * count
            print(f"{name + ' ' + kind:<10} {f'{m} x {n} x {k}':>20} {seconds * 1e3:8.3f} {flops / seconds / 1e9:9.1f}")
    print(f"all products of a step: {total_flops / 1e9:.2f} GFLOP in {total_seconds * 1e3:.2f} ms = "
          f"{total_flops / total_seconds / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The mHC primitives as PyTorch code — the math of tests/reference/mhc_reference.py, the way a
framework's native implementation writes it — timed forward and backward, for the side-by-side
comparison with Plexus's backends at the same sizes.

  /usr/bin/python3 bench/torch_mhc.py [--tokens 4096] [--streams 4] [--hidden 512]
      [--iterations 20] [--threads 2] [--reps 21] [--device cpu|cuda] [--dtype f32|bf16]
      [--compile] [--plexus-json FILE]

--plexus-json takes the JSON of `plexus bench --primitive all --json FILE` run at the same sizes,
threads and device, and prints, per primitive, PyTorch's forward + backward next to each Plexus
backend's and the ratio.
--compile times torch.compile of the same functions (PyTorch 2.0 or newer; Debian's 1.13 has
none, and the script says so). On CUDA every timing ends with a device synchronization; bf16
makes the activations bfloat16 and keeps the mappings float32, as the "mhc" family does.
Times are medians of --reps runs after 3 warm-up runs.

GPU target sizes (s=8192, b=4 → T=32768; n=4; C=7168):
  /usr/bin/python3 bench/torch_mhc.py --device cuda --dtype bf16 --tokens 32768 --hidden 7168 --compile
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import mhc_reference as mhc  # noqa: E402
from torch_timing import median_ms  # noqa: E402




def plexus_rows(path):
    """{backend: {primitive: fwd+bwd median ms}} from `plexus bench --json`."""
    import json
    with open(path) as f:
        report = json.load(f)
    out = {}
    for row in report["rows"]:
        if row["direction"] not in ("forward", "backward"):
            continue
        per = out.setdefault(row["backend"], {})
        per[row["primitive"]] = per.get(row["primitive"], 0.0) + row["median_ms"]
    return report, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--plexus-json", help="`plexus bench --primitive all --json` output at the same sizes")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile of each primitive")
    args = ap.parse_args()
    if args.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch_mhc.py: --compile needs PyTorch 2.0 or newer; this is {torch.__version__}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("torch_mhc.py: --device cuda: this PyTorch sees no CUDA device")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    act = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    t, n, c, k, eps = args.tokens, args.streams, args.hidden, args.iterations, args.eps
    w = n * n + 2 * n

    def leaf(*shape, scale=1.0, offset=0.0, dtype=torch.float32):
        return (torch.randn(*shape, device=device) * scale + offset).to(dtype).requires_grad_(True)

    # Activations (x, f, u, y and their gradients) in the chosen dtype; mappings in float32.
    x = leaf(t, n, c, dtype=act)
    phi = leaf(n * c, w, scale=(n * c) ** -0.5, dtype=act)
    p_in, r_in = leaf(t, w), leaf(t, scale=0.3, offset=1.0)
    alpha, b = leaf(3, scale=0.5), leaf(w, scale=0.5)
    h_pre_in = leaf(t, n, scale=0.5, offset=0.5)
    h_res_in, h_post_in = leaf(t, n, n, scale=0.5), leaf(t, n, scale=0.5, offset=1.0)
    f, bias = leaf(t, c, dtype=act), leaf(c, scale=0.3, dtype=act)
    g = {"p": torch.randn(t, w, device=device), "r": torch.randn(t, device=device),
         "h_pre": torch.randn(t, n, device=device), "h_post": torch.randn(t, n, device=device),
         "h_res": torch.randn(t, n, n, device=device), "u": torch.randn(t, c, device=device).to(act),
         "y": torch.randn(t, n, c, device=device).to(act)}

    def fwd_bwd(forward, grads):
        def run_forward():
            with torch.no_grad():
                forward()

        def run_both():
            outs = forward()
            torch.autograd.backward(outs, grads)
        return run_forward, run_both

    functions = {
        "proj_rms": (lambda: mhc.proj_rms(x, phi, eps), [g["p"], g["r"]]),
        "mappings": (lambda: mhc.mappings(p_in, r_in, alpha, b, n, k, eps), [g["h_pre"], g["h_post"], g["h_res"]]),
        # The mixing weights in the activations' dtype, as a bf16 PyTorch model would multiply
        # them (a float32 h_res @ bf16 x is refused; a no-op in float32).
        "aggregate": (lambda: (mhc.aggregate(x, h_pre_in.to(act)),), [g["u"]]),
        "post_res": (lambda: (mhc.post_res(x, h_res_in.to(act), h_post_in.to(act), f, bias, False),), [g["y"]]),
    }
    modes = {"eager": {name: fwd_bwd(fn, grads) for name, (fn, grads) in functions.items()}}
    if args.compile:
        modes["compile"] = {name: fwd_bwd(torch.compile(fn), grads) for name, (fn, grads) in functions.items()}
    print(f"PyTorch {torch.__version__} on {device}, T={t} n={n} C={c} K={k} {args.dtype} activations, "
          f"{args.threads} threads, median of {args.reps} runs (ms)")
    totals = {}
    measured = {}
    for mode, primitives in modes.items():
        print(f"{mode:<12} {'fwd':>9} {'fwd+bwd':>9}")
        total = 0.0
        for name, (forward, both) in primitives.items():
            f_ms, fb_ms = median_ms(forward, args.reps, sync), median_ms(both, args.reps, sync)
            total += fb_ms
            measured[(mode, name)] = fb_ms
            print(f"  {name:<10} {f_ms:9.3f} {fb_ms:9.3f}")
        print(f"  {'all':<10} {'':>9} {total:9.3f}")
        totals[mode] = total
    if args.plexus_json:
        report, backends = plexus_rows(args.plexus_json)
        sizes = report["sizes"]
        if (sizes.get("tokens"), sizes.get("streams"), sizes.get("hidden")) != (t, n, c):
            print(f"note: {args.plexus_json} was measured at {sizes}, not at these sizes")
        print("\nforward + backward, ms (ratio = PyTorch / Plexus backend)")
        header = f"{'primitive':<10}" + "".join(f" {'torch ' + m:>14}" for m in modes)
        for backend in backends:
            header += f" {backend:>12}" + "".join(f" {'x ' + m:>10}" for m in modes)
        print(header)
        for name in list(functions) + ["all"]:
            line = f"{name:<10}"
            torch_ms = {m: (totals[m] if name == "all" else measured[(m, name)]) for m in modes}
            line += "".join(f" {torch_ms[m]:14.3f}" for m in modes)
            for backend, per in backends.items():
                ours = sum(per.values()) if name == "all" else per.get(name)
                if ours is None:
                    line += f" {'-':>12}" + "".join(f" {'-':>10}" for _ in modes)
                    continue
                line += f" {ours:12.3f}" + "".join(f" {torch_ms[m] / ours:9.2f}x" for m in modes)
            print(line)


if __name__ == "__main__":
    main()

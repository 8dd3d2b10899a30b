#!/usr/bin/env python3
"""Training throughput of plexus-train against the same model in PyTorch, side by side.

Every side trains the model of one run config (the default unless --config) with the same
micro-batch size, sequence length, microbatches per step and thread count: forward, backward,
gradient clipping and an AdamW step per training step, float32 on the CPU. The PyTorch peers
(bench/torch_train_peer.py, each in a process of its own, each configured as its experts would:
one thread pool, subnormals flushed, its fastest formulation of the same model, checked against
tests/reference/gpt_reference.py before timing):
  debian   Debian's python3-torch (1.13, OpenBLAS), the test suite's reference, in its own pool
  debian-openblas  the same with its threads given to OpenBLAS (PyTorch's pool one thread): it
           splits a matrix product only through OpenBLAS, so this can be its faster setup
  eager    current PyTorch from PyPI (MKL), eager, F.scaled_dot_product_attention, fused AdamW
  compile  the same through torch.compile (inductor)
eager and compile need the venv scripts/bench-env.sh creates (.venv-bench); without it they are
skipped, saying so. Runs alternate (Plexus, each peer, Plexus, ...) so drift of the machine hits
every side. Reported: each side's setup, the median seconds per step after warm-up steps,
tokens/s, the ratio against each peer and against the strongest.

  /usr/bin/python3 bench/train_vs_torch.py [--config configs/default.json] [--threads 2]
      [--steps 30] [--warmup 5] [--repeats 3] [--peers debian,debian-openblas,eager,compile]
      [--device cpu|cuda] [--precision fp32|bf16] [--set key=value ...] [--json result.json]

With --device cuda every side trains on the GPU (Plexus with run.device=cuda, PyTorch with
tensors on cuda:0, each step timed after a device synchronization). --precision bf16 (GPU only)
trains Plexus with run.precision=bf16 and PyTorch under torch.autocast(dtype=torch.bfloat16),
PyTorch's own mixed precision: float32 parameters and optimizer, bf16 products.

Needs a built tree (scripts/build.sh) and the dataset the config names (scripts/quickstart.sh
prepares the default one). Run it with the system python.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reference"))


def resolved_config(args):
    """The run config as plexus-train reads it, with the model's derived sizes filled in: 0 means
    "derive", as in the engine: as many query groups as heads, Megatron's default FFN width (4C, or
    with swiglu int(8C / 3 / 64) * 64)."""
    cmd = [str(args.build / "bin" / "plexus"), "config", "show", str(args.config)]
    for s in args.set:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"train_vs_torch: `{' '.join(cmd)}` failed:\n{out.stderr}")
    config = json.loads(out.stdout)
    m = config["model"]
    m["num_query_groups"] = m["num_query_groups"] or m["num_attention_heads"]
    swiglu_ffn = int((4 * m["hidden_size"] * 2 / 3) / 64) * 64
    m["ffn_hidden_size"] = m["ffn_hidden_size"] or (swiglu_ffn if m["activation"] == "swiglu" else 4 * m["hidden_size"])
    return config


def flops_per_token(args):
    """The model's training FLOPs per token as plexus-train counts them (`plexus model show`):
    the work every side computes, since they all train the same model."""
    cmd = [str(args.build / "bin" / "plexus"), "model", "show", "--json", "--config", str(args.config)]
    for s in args.set:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"train_vs_torch: `{' '.join(cmd)}` failed:\n{out.stderr}")
    return json.loads(out.stdout)["flops_per_token"]


def gemm_peak(args):
    """The float32 GEMM peak of the same threads (bench/bench_peak.cpp), or None without it."""
    tool = args.build / "bin" / "bench_peak"
    if args.device != "cpu" or not tool.exists():
        if args.device == "cpu":
            print(f"train_vs_torch: no {tool} (cmake --build build --target bench_peak): no MFU column",
                  file=sys.stderr)
        return None
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        run = subprocess.run([str(tool), "--json", f.name], capture_output=True, text=True, env=env)
        if run.returncode != 0:
            sys.exit(f"train_vs_torch: bench_peak failed:\n{run.stderr}")
        return json.loads(pathlib.Path(f.name).read_text())


def plexus_step_seconds(args, workdir):
    """One plexus-train run; the per-step wall times it recorded after the warm-up steps."""
    out_dir = pathlib.Path(workdir) / f"plexus-{time.monotonic_ns()}"
    cmd = [str(args.build / "bin" / "plexus-train"), "--config", str(args.config)]
    for s in args.set + [f"train.steps={args.warmup + args.steps}", "train.log_interval=1",
                         "train.eval_interval=0", "train.eval_iters=1", "checkpoint.interval=0",
                         "sample.tokens=0", f"run.output_dir={out_dir}", f"run.device={args.device}",
                         f"run.precision={args.precision}"]:
        cmd += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    run = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
    if run.returncode != 0:
        sys.exit(f"train_vs_torch: plexus-train failed (exit {run.returncode}):\n{run.stderr[-4000:]}")
    seconds = []
    with open(out_dir / "metrics.jsonl") as f:
        for line in f:
            record = json.loads(line)
            if record.get("event") == "step" and record["step"] > args.warmup:
                seconds.append(record["step_seconds"])
    return seconds


# The PyTorch peers: (name, the python that runs it, mode). "debian" is Debian's python3-torch
# (1.13, OpenBLAS), the test suite's reference; "eager" and "compile" are current PyTorch from
# PyPI (MKL) in the venv scripts/bench-env.sh creates, eagerly and through torch.compile; "this"
# and "this-compile" are the torch of the python running this script (e.g. a CUDA build on a GPU
# machine, scripts/gpu-check.sh).
PEERS = {"debian": ("/usr/bin/python3", "eager"), "eager": (None, "eager"), "compile": (None, "compile"),
         "this": (sys.executable, "eager"), "this-compile": (sys.executable, "compile"),
         "debian-openblas": ("/usr/bin/python3", "eager")}
# The thread pool a peer multiplies in: its own (PyTorch's OpenMP pool, the BLAS under it
# single-threaded), or OpenBLAS's (PyTorch's pool one thread, OPENBLAS_NUM_THREADS threads).
# Debian's PyTorch splits a matrix product only through OpenBLAS, so for work made of products
# the second is its faster configuration; PyPI's (MKL) splits them in its own pool.
OPENBLAS_POOL = {"debian-openblas"}


def bench_python(args):
    return args.bench_venv / "bin" / "python"


def available_peers(args):
    names = [p.strip() for p in args.peers.split(",") if p.strip()]
    for name in names:
        if name not in PEERS:
            sys.exit(f"train_vs_torch: --peers: unknown peer '{name}' (expected one of {', '.join(PEERS)})")
    if not bench_python(args).exists():
        missing = [n for n in names if PEERS[n][0] is None]
        if missing:
            print(f"train_vs_torch: skipping {', '.join(missing)}: no {bench_python(args)} "
                  f"(scripts/bench-env.sh creates it)", file=sys.stderr)
        names = [n for n in names if PEERS[n][0] is not None]
    if not names:
        sys.exit("train_vs_torch: no peer to run")
    return names


def torch_step_seconds(args, config, peer, workdir, script="torch_train_peer.py", extra=None):
    """One run of a PyTorch peer (bench/torch_train_peer.py, or `script` with `extra` added to its
    spec) in a process of its own, so that the thread settings it needs at load time are in its
    environment."""
    python, mode = PEERS[peer]
    python = python or str(bench_python(args))
    spec = pathlib.Path(workdir) / f"peer-{time.monotonic_ns()}.json"
    # One pool: PyTorch's own (torch.set_num_threads in the peer) with the BLAS inside it
    # single-threaded, or OpenBLAS's with PyTorch's at one thread (OPENBLAS_POOL).
    openblas_pool = peer in OPENBLAS_POOL
    torch_threads = 1 if openblas_pool else args.threads
    spec.write_text(json.dumps({"config": config, "threads": torch_threads, "steps": args.steps,
                                "warmup": args.warmup, "mode": mode, "device": args.device,
                                "precision": args.precision, **(extra or {})}))
    env = dict(os.environ, OMP_NUM_THREADS=str(torch_threads),
               OPENBLAS_NUM_THREADS=str(args.threads if openblas_pool else 1),
               MKL_NUM_THREADS=str(args.threads))
    run = subprocess.run([python, str(ROOT / "bench" / script), str(spec)],
                         capture_output=True, text=True, env=env)
    if run.returncode != 0:
        sys.exit(f"train_vs_torch: peer {peer} failed (exit {run.returncode}):\n{run.stderr[-4000:]}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    setup = result["setup"] + (f", OpenBLAS pool of {args.threads} threads" if openblas_pool else "")
    return result["seconds"], setup


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=pathlib.Path, default=ROOT / "configs" / "default.json")
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (both sides)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="activations' precision (bf16 on a GPU only), both sides")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps at the start of each run")
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs per side")
    ap.add_argument("--set", action="append", default=[], help="config override, as plexus-train --set")
    ap.add_argument("--peers", default="debian,debian-openblas,eager,compile",
                    help="PyTorch peers, comma-separated: debian (Debian's torch in its own pool), "
                         "debian-openblas (the same with its threads given to OpenBLAS), eager and compile "
                         "(PyPI torch from the venv of scripts/bench-env.sh), this and this-compile "
                         "(the torch of the python running this script)")
    ap.add_argument("--bench-venv", type=pathlib.Path, default=ROOT / ".venv-bench",
                    help="the venv with PyPI's torch (scripts/bench-env.sh)")
    ap.add_argument("--json", type=pathlib.Path, help="also write the result here")
    args = ap.parse_args()
    if args.precision == "bf16" and not args.device.startswith("cuda"):
        ap.error("--precision bf16 needs --device cuda (Plexus computes in float32 on the CPU)")

    config = resolved_config(args)
    m = config["model"]
    t = config["train"]
    tokens_per_step = t["micro_batch_size"] * m["seq_length"] * t["microbatches"]
    peers = available_peers(args)
    model_flops = flops_per_token(args)
    peak = gemm_peak(args)
    runs = {"plexus": [], **{peer: [] for peer in peers}}
    setups = {"plexus": f"plexus-train, OMP_NUM_THREADS={args.threads} (OpenMP pool, OpenBLAS single-threaded in it)"}
    with tempfile.TemporaryDirectory(prefix="plexus-bench-") as workdir:
        for r in range(args.repeats):  # the sides alternate, so drift of the machine hits all of them
            runs["plexus"].append(plexus_step_seconds(args, workdir))
            line = f"repeat {r + 1}/{args.repeats}: plexus {statistics.median(runs['plexus'][-1]) * 1e3:.1f}"
            for peer in peers:
                seconds, setups[peer] = torch_step_seconds(args, config, peer, workdir)
                runs[peer].append(seconds)
                line += f", {peer} {statistics.median(seconds) * 1e3:.1f}"
            print(line + " ms/step", flush=True)

    result = {"config": str(args.config), "overrides": args.set, "threads": args.threads, "device": args.device,
              "precision": args.precision,
              "tokens_per_step": tokens_per_step, "steps_timed": args.steps, "repeats": args.repeats,
              "model": {k: m[k] for k in ("hidden_size", "num_layers", "num_attention_heads", "num_query_groups",
                                          "ffn_hidden_size", "seq_length", "vocab_size", "activation")},
              "micro_batch_size": t["micro_batch_size"], "microbatches": t["microbatches"]}
    print(f"\nmodel: {m['num_layers']} layers, C={m['hidden_size']}, FFN={m['ffn_hidden_size']}, "
          f"seq {m['seq_length']}, micro-batch {t['micro_batch_size']} x {t['microbatches']}; {args.threads} threads")
    for side, setup in setups.items():
        print(f"  {side}: {setup}")
    result["setups"] = setups
    result["flops_per_token"] = model_flops
    if peak:
        result["gemm_peak"] = peak
        print(f"  float32 GEMM peak of {args.threads} threads: {peak['peak_gflops']:.1f} GFLOP/s ({peak['peak_way']}, "
              f"bench_peak); MFU = the model's {model_flops / 1e6:.2f}M training FLOPs per token x tokens/s / peak")
    print(f"{'':8} {'ms/step':>9} {'(spread)':>17} {'tokens/s':>10} {'GFLOP/s':>9} {'MFU':>6}")
    for side, per_run in runs.items():
        all_steps = [x for run in per_run for x in run]
        median = statistics.median(all_steps)
        run_medians = [statistics.median(run) for run in per_run]
        gflops = model_flops * tokens_per_step / median / 1e9
        mfu = gflops / peak["peak_gflops"] if peak else None
        result[side] = {"median_step_seconds": median, "tokens_per_s": tokens_per_step / median,
                        "run_medians": run_medians, "gflops_per_s": gflops, "mfu": mfu}
        print(f"{side:8} {median * 1e3:9.1f} {f'[{min(run_medians) * 1e3:.1f}, {max(run_medians) * 1e3:.1f}]':>17} "
              f"{tokens_per_step / median:10.0f} {gflops:9.1f} {f'{mfu:.0%}' if mfu else '-':>6}")
    result["ratios"] = {}
    for peer in peers:
        ratio = result[peer]["median_step_seconds"] / result["plexus"]["median_step_seconds"]
        result["ratios"][peer] = ratio
        print(f"ratio against {peer} (Plexus tokens/s / its tokens/s): {ratio:.2f}x")
    strongest = min(peers, key=lambda p: result[p]["median_step_seconds"])
    result["strongest_peer"] = strongest
    print(f"strongest peer: {strongest}; Plexus against it: {result['ratios'][strongest]:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

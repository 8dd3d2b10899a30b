#!/usr/bin/env python3
"""Data-parallel scaling of plexus-train on this machine: the same tokens per step trained by one
process (one thread, then every core) and by N ranks under mpirun (one thread each, DDP: the fsdp
strategy no_shard, each unit's gradients all-reduced as soon as its backward is done).

  /usr/bin/python3 bench/dp_scaling.py [--ranks 2] [--steps 40] [--repeats 2] [--data build/data/fortunes]

Prints the median step time of steps 11.. and tokens/s of each run, and the speed-up against
the one-thread process. Run scripts/quickstart.sh first (it prepares build/data/fortunes).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "build", "bin", "plexus-train")


def run(label, ranks, microbatches, threads, args, out_root):
    out = os.path.join(out_root, label)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [TRAIN, "--set", f"data.path={args.data}", "--set", f"run.output_dir={out}",
           "--set", f"train.steps={args.steps}", "--set", "train.eval_interval=0", "--set", "sample.tokens=0",
           "--set", f"train.microbatches={microbatches}"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if ranks > 1:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), "-x", "OMP_NUM_THREADS"] + cmd
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        sys.exit(f"dp_scaling.py: {label} failed:\n{done.stdout}{done.stderr}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        steps = [r for r in map(json.loads, f) if r["event"] == "step"][10:]
    return (statistics.median(r["step_seconds"] for r in steps) * 1e3,
            statistics.median(r["tokens_per_s"] for r in steps))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--data", default=os.path.join(ROOT, "build", "data", "fortunes"))
    args = ap.parse_args()
    if args.steps <= 10:
        sys.exit("dp_scaling.py: --steps must exceed 10 (the first 10 are warm-up)")
    n = args.ranks
    cores = os.cpu_count() or 1
    runs = [
        (f"1 process, 1 thread, {n} microbatches", 1, n, 1),
        (f"1 process, {cores} threads, {n} microbatches", 1, n, cores),
        (f"{n} ranks x 1 thread, 1 microbatch (DDP)", n, 1, 1),
    ]
    with tempfile.TemporaryDirectory() as out_root:
        results = {}
        for _ in range(args.repeats):
            for i, (label, ranks, mb, threads) in enumerate(runs):
                results.setdefault(i, []).append(run(f"run{i}", ranks, mb, threads, args, out_root))
    base = statistics.median(r[1] for r in results[0])
    print(f"{'run (same tokens per step)':<52} {'step ms':>9} {'tokens/s':>10} {'vs 1 thread':>12}")
    for i, (label, *_rest) in enumerate(runs):
        ms = statistics.median(r[0] for r in results[i])
        tps = statistics.median(r[1] for r in results[i])
        print(f"{label:<52} {ms:9.1f} {tps:10.0f} {tps / base:11.2f}x")


if __name__ == "__main__":
    main()

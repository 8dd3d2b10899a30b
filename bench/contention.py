#!/usr/bin/env python3
"""Training on a shared machine: plexus-train's and PyTorch's step time alone, beside one busy
process (a single thread spinning in Python), and two trainings at once, all with the same
threads (--threads, default: the cores) on the same model (configs/default.json unless
--config). Each configuration of OpenMP's waits is run in every situation:

  plexus          plexus-train as it starts by default (run.adapt_threads: the OpenMP team
                  follows the cores it gets)
  plexus/fixed    run.adapt_threads=false: a team as large as the cores throughout, as before
  plexus/passive  the fixed team with OMP_WAIT_POLICY=PASSIVE (idle threads sleep at once)
  torch           Debian's PyTorch (bench/torch_train_peer.py, eager, libgomp's default waits)
  torch/passive   the same with OMP_WAIT_POLICY=PASSIVE

  /usr/bin/python3 bench/contention.py [--build build] [--rounds 3] [--steps 30] [--warmup 5]
      [--variants plexus,plexus/fixed,plexus/passive,torch,torch/passive] [--json FILE] [--set K=V]...

Reported: the median over rounds of each run's median step time as tokens/s, and its ratio to the
same variant alone. Two trainings at once report the slower of the two.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import train_vs_torch as tvt  # noqa: E402  (the plexus-train run and the PyTorch peer)

PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}
FIXED = ["run.adapt_threads=false"]
VARIANTS = {"plexus": ("plexus", {}, []), "plexus/fixed": ("plexus", {}, FIXED),
            "plexus/passive": ("plexus", PASSIVE, FIXED),
            "torch": ("torch", {}, []), "torch/passive": ("torch", PASSIVE, [])}
SITUATIONS = ["alone", "beside a busy thread", "two at once"]


class Environment:
    """os.environ with `extra` while inside (the bench's helpers copy os.environ)."""

    def __init__(self, extra):
        self.extra, self.saved = extra, {}

    def __enter__(self):
        for key, value in self.extra.items():
            self.saved[key] = os.environ.get(key)
            os.environ[key] = value

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def step_seconds(args, config, kind, sets, workdir):
    if kind == "plexus":
        plexus_args = argparse.Namespace(**vars(args))
        plexus_args.set = args.set + sets
        return statistics.median(tvt.plexus_step_seconds(plexus_args, workdir))
    return statistics.median(tvt.torch_step_seconds(args, config, "debian", workdir)[0])


def measure(args, config, variant, situation, workdir):
    kind, env, sets = VARIANTS[variant]
    with Environment(env):
        if situation == "alone":
            return step_seconds(args, config, kind, sets, workdir)
        if situation == "beside a busy thread":
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                time.sleep(0.5)
                return step_seconds(args, config, kind, sets, workdir)
            finally:
                busy.kill()
                busy.wait()
        results = [None, None]

        def one(i):
            results[i] = step_seconds(args, config, kind, sets, workdir)

        runs = [threading.Thread(target=one, args=(i,)) for i in range(2)]
        for t in runs:
            t.start()
        for t in runs:
            t.join()
        return max(results)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=pathlib.Path, default=ROOT / "configs" / "default.json")
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--json")
    args = ap.parse_args()
    args.device, args.precision = "cpu", "fp32"
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"contention: unknown variant '{v}' (expected one of {', '.join(VARIANTS)})")
    config = tvt.resolved_config(args)
    tokens = config["train"]["micro_batch_size"] * config["train"]["microbatches"] * config["model"]["seq_length"]
    seconds = {(v, s): [] for v in variants for s in SITUATIONS}
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            for v in variants:
                for s in SITUATIONS:
                    seconds[(v, s)].append(measure(args, config, v, s, workdir))
                    print(f"round {r + 1}: {v}, {s}: {tokens / seconds[(v, s)][-1]:.0f} tokens/s",
                          file=sys.stderr)
    result = {v: {s: tokens / statistics.median(seconds[(v, s)]) for s in SITUATIONS} for v in variants}
    print(f"{'variant':<16}" + "".join(f"{s:>30}" for s in SITUATIONS))
    for v in variants:
        alone = result[v]["alone"]
        cells = [f"{result[v][s]:>10.0f} tokens/s ({result[v][s] / alone:4.2f})" for s in SITUATIONS]
        print(f"{v:<16}" + "".join(f"{c:>30}" for c in cells))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    sys.exit(main())

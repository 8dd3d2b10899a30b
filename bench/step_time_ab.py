#!/usr/bin/env python3
"""Paired step-time benchmark of two builds (A: before a change, B: after it) on this machine.

For each config (default: the embedded default GPT and configs/hybrid.json) the builds train the
same run in alternating order, round after round: A B, then B A, then A B, ... (so a drift of
the machine, or an advantage of going first or second, falls on both sides alike). Each run is
one plexus-train of --warmup + --steps steps, every step logged; its step_seconds after the
warm-up steps (metrics.jsonl, "step" records) give the run's median. Per config the report is:
A's and B's median step time (the median over rounds of each run's median) with tokens/s, the
ratio B/A (the median of the rounds' paired ratios, below 1 means B is faster), the lowest and
highest round ratio, and whether the median ratio is within +-tolerance (default 2%) of 1.

  # the builds engine-parity.sh made: BASE (A) against this working tree (B)
  /usr/bin/python3 bench/step_time_ab.py build-parity/build-base build-parity/build-worktree
  # options (defaults shown)
  /usr/bin/python3 bench/step_time_ab.py BUILD_A BUILD_B [--configs default,configs/hybrid.json]
      [--rounds 5] [--steps 30] [--warmup 5] [--threads 2] [--tolerance 0.02] [--data PREFIX]
      [--set key=value ...] [--json result.json]

BUILD_A and BUILD_B are build directories (with bin/plexus-train and lib/plexus/plugins), e.g.
those of scripts/engine-parity.sh (build-parity/build-base and build-parity/build-worktree) or
scripts/build.sh. "default" in --configs is the config compiled into each build; any other entry
is a config file, relative to the repository root, given to both builds. Both sides run with
OMP_NUM_THREADS=--threads. The corpus is --data, else the config's own data.path when it exists,
else Debian's fortunes prepared once into a temporary directory (scripts/lib/fortunes.sh). A
build against itself (BUILD_A = BUILD_B) measures the noise floor: its spread says how much of a
ratio is noise. Timing on a busy machine (other builds running) widens the spread; the load
average is printed before and after.

Exit status: 0 when every config's median ratio is within the tolerance, 1 when one is not, 2
when a run fails. Run it with the system python (/usr/bin/python3); standard library only.
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


def fail(message, code=2):
    print(f"step_time_ab: {message}", file=sys.stderr)
    sys.exit(code)


def config_args(config):
    return [] if config == "default" else ["--config", str(ROOT / config)]


def resolved_config(build, config, sets):
    cmd = [str(build / "bin" / "plexus"), "config", "show"]
    cmd += ["--default"] if config == "default" else [str(ROOT / config)]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        fail(f"`{' '.join(cmd)}` failed:\n{out.stderr}")
    return json.loads(out.stdout)


def corpus(args, build, config, tmp):
    """The data.path both sides train on."""
    if args.data:
        return args.data
    path = resolved_config(build, config, args.set)["data"]["path"]
    full = path if os.path.isabs(path) else str(ROOT / path)
    if os.path.exists(full + ".idx"):
        return full
    prefix = os.path.join(tmp, "fortunes")
    if not os.path.exists(prefix + ".idx"):
        print(f"no dataset at {full}: preparing Debian's fortunes into {prefix}", flush=True)
        script = f'source "{ROOT}/scripts/lib/fortunes.sh" && prepare_fortunes "$1" "$2"'
        done = subprocess.run(["bash", "-c", script, "prepare", str(build / "bin" / "plexus"), prefix],
                              capture_output=True, text=True)
        if done.returncode != 0:
            fail(f"no dataset: {full} does not exist and the fortunes could not be prepared "
                 f"(give --data PREFIX):\n{done.stderr}")
    return prefix


def step_seconds(build, config, data, args, out_dir):
    """One plexus-train run of `build`; the step_seconds of its steps after the warm-up."""
    cmd = [str(build / "bin" / "plexus-train")] + config_args(config)
    for s in args.set + [f"train.steps={args.warmup + args.steps}", "train.log_interval=1",
                         "train.eval_interval=0", "train.eval_iters=1", "checkpoint.interval=0",
                         "sample.tokens=0", f"data.path={data}", f"run.output_dir={out_dir}"]:
        cmd += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    run = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, cwd=ROOT)
    if run.returncode != 0:
        fail(f"`{' '.join(cmd)}` failed (exit {run.returncode}):\n{run.stderr[-4000:]}")
    seconds = []
    with open(out_dir / "metrics.jsonl") as f:
        for line in f:
            record = json.loads(line)
            if record.get("event") == "step" and record["step"] > args.warmup:
                seconds.append(record["step_seconds"])
    if len(seconds) < args.steps:
        fail(f"{out_dir}/metrics.jsonl has {len(seconds)} step records after the warm-up, expected {args.steps}")
    return seconds


def load():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def busy_warning(own=0):
    """A warning when other work keeps this machine's cores busy: the 1-minute load, less `own`
    (this benchmark's threads, when it has been running)."""
    try:
        one_minute = float(open("/proc/loadavg").read().split()[0])
    except (OSError, ValueError, IndexError):
        return ""
    cores = os.cpu_count() or 1
    if one_minute - own < 0.5 * cores:
        return ""
    return (f"\nWARNING: the load average {one_minute:.1f} on {cores} cores says other work is running: OpenMP "
            "threads that share cores time badly, and the ratios are noise until the machine is idle")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_a", type=pathlib.Path, help="build directory of A (before)")
    ap.add_argument("build_b", type=pathlib.Path, help="build directory of B (after)")
    ap.add_argument("--configs", default="default,configs/hybrid.json",
                    help="comma-separated: default (the embedded config) or config files (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=5, help="paired rounds per config (default 5)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per run (default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps at the start of each run (default 5)")
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of both sides (default 2)")
    ap.add_argument("--tolerance", type=float, default=0.02, help="allowed |B/A - 1| (default 0.02)")
    ap.add_argument("--data", help="dataset prefix for every run (default: the config's data.path, else fortunes)")
    ap.add_argument("--set", action="append", default=[], help="config override for both sides, as plexus-train --set")
    ap.add_argument("--json", type=pathlib.Path, help="also write the result here")
    args = ap.parse_args()
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--rounds and --steps must be >= 1, --warmup >= 0")
    builds = {"A": args.build_a.resolve(), "B": args.build_b.resolve()}
    for side, build in builds.items():
        if not (build / "bin" / "plexus-train").exists():
            fail(f"{side}: {build}/bin/plexus-train does not exist (build it: scripts/build.sh)")
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in configs:
        if c != "default" and not (ROOT / c).is_file():
            fail(f"config {c}: no such file under {ROOT}")

    started = time.monotonic()
    print(f"A: {builds['A']}\nB: {builds['B']}")
    print(f"{args.rounds} rounds per config, {args.warmup} + {args.steps} steps per run, "
          f"OMP_NUM_THREADS={args.threads}; load average {load()}{busy_warning()}", flush=True)
    result = {"a": str(builds["A"]), "b": str(builds["B"]), "rounds": args.rounds, "steps": args.steps,
              "warmup": args.warmup, "threads": args.threads, "tolerance": args.tolerance, "overrides": args.set,
              "configs": {}}
    with tempfile.TemporaryDirectory(prefix="plexus-ab-") as tmp:
        data = {c: corpus(args, builds["A"], c, tmp) for c in configs}
        tokens = {}
        for c in configs:
            r = resolved_config(builds["A"], c, args.set)
            tokens[c] = r["train"]["micro_batch_size"] * r["model"]["seq_length"] * r["train"]["microbatches"]
        medians = {c: {"A": [], "B": []} for c in configs}
        for rnd in range(args.rounds):
            order = ("A", "B") if rnd % 2 == 0 else ("B", "A")
            for c in configs:
                line = []
                for side in order:
                    out = pathlib.Path(tmp) / f"round{rnd + 1}-{side}-{configs.index(c)}"
                    m = statistics.median(step_seconds(builds[side], c, data[c], args, out))
                    medians[c][side].append(m)
                    line.append(f"{side} {m * 1e3:.2f}")
                ratio = medians[c]["B"][-1] / medians[c]["A"][-1]
                print(f"round {rnd + 1}/{args.rounds} {c}: {', '.join(line)} ms/step; B/A {ratio:.4f}", flush=True)

    print(f"\nload average {load()}; {time.monotonic() - started:.0f} s in all{busy_warning(args.threads)}")
    print(f"{'config':<22} {'A ms/step':>10} {'B ms/step':>10} {'A tok/s':>9} {'B tok/s':>9} "
          f"{'B/A':>7} {'rounds: min..max':>17}  verdict")
    ok = True
    for c in configs:
        a, b = medians[c]["A"], medians[c]["B"]
        ratios = [y / x for x, y in zip(a, b)]
        ratio = statistics.median(ratios)
        within = abs(ratio - 1) <= args.tolerance
        ok = ok and within
        verdict = f"{'within' if within else 'OUTSIDE'} +-{args.tolerance:.0%}"
        if within and (min(ratios) < 1 - args.tolerance or max(ratios) > 1 + args.tolerance):
            verdict += " (some rounds outside: noisy, rerun with more --rounds)"
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{c:<22} {ma * 1e3:10.2f} {mb * 1e3:10.2f} {tokens[c] / ma:9.0f} {tokens[c] / mb:9.0f} "
              f"{ratio:7.4f} {f'{min(ratios):.4f}..{max(ratios):.4f}':>17}  {verdict}")
        result["configs"][c] = {"a_round_median_seconds": a, "b_round_median_seconds": b,
                                "a_median_seconds": ma, "b_median_seconds": mb, "ratios": ratios,
                                "ratio": ratio, "within_tolerance": within, "tokens_per_step": tokens[c]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

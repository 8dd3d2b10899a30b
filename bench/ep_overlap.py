#!/usr/bin/env python3
"""Expert-parallel overlap on this machine: an MoE GPT (every MLP an MoE layer, ep = world)
under `mpirun -np N`, trained with the sequential scheduler and with combined_1f1b. Prints the
median tokens/s of the steps after the warm-up and, from train.profile's step profile, the time
per step inside the MoE layers (their compute plus whatever all-to-all wait their compute stages
could not hide) and in the whole step. Run from the repository root after a build and
scripts/quickstart.sh (the fortunes data):

    /usr/bin/python3 bench/ep_overlap.py --ranks 2 4 --steps 30

--build picks another build directory (scripts/gpu-check.sh passes its build-gpu), and every
--set is handed to plexus-train (e.g. --set data.path=PREFIX for another corpus).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def run(ranks, scheduler, steps, microbatches, out, build="build", extra=()):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "--oversubscribe", "-np", str(ranks), os.path.join(build, "bin", "plexus-train"),
           "--config", "configs/default.json", "--set", f"run.output_dir={out}",
           "--set", "model.moe.layer_freq=1", "--set", "model.moe.options.num_moe_experts=4",
           "--set", f"train.microbatches={microbatches}", "--set", f"train.steps={steps}",
           "--set", "train.eval_interval=0", "--set", "train.profile=true",
           "--set", f"train.log_interval={steps}", "--set", "sample.tokens=0",
           "--set", 'distributed.topology.options={"ep": %d}' % ranks,
           "--set", f"scheduler.component={scheduler}",
           "--set", 'plugins.load=["sequential_scheduler","transformer","combined_1f1b"]']
    for setting in extra:
        cmd += ["--set", setting]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    warm = max(1, steps // 3)
    tokens = [r["tokens_per_s"] for r in records if r["event"] == "step" and r["step"] > warm]
    profile = [r for r in records if r["event"] == "profile"][-1]
    moe = sum(p["forward_ms"] + p["backward_ms"] for p in profile["parts"] if "(moe.layer)" in p["part"])
    return statistics.median(tokens), moe, profile["step_ms"], profile["steps"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--build", default="build", help="the build directory (default: build)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to plexus-train, after the benchmark's own settings")
    args = parser.parse_args()
    print("| ranks (ep) | scheduler | tokens/s (median) | MoE layers ms/step | step ms (mean) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            for scheduler in ("sequential", "combined_1f1b"):
                out = os.path.join(tmp, f"{scheduler}{ranks}")
                tps, moe, step_ms, _ = run(ranks, scheduler, args.steps, args.microbatches, out, args.build, args.set)
                print(f"| {ranks} | {scheduler} | {tps:,.0f} | {moe:.1f} | {step_ms:.1f} |", flush=True)


if __name__ == "__main__":
    main()

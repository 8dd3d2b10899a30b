#!/usr/bin/env python3
"""The data-parallel strategies of plugin fsdp on this machine: the default model under
`mpirun -np N` (one OpenMP thread per rank) with no_shard (DDP), optim (ZeRO-1), optim_grads
(ZeRO-2) and optim_grads_params (ZeRO-3), the last also without prefetch. Prints per strategy the
median tokens/s of the steps after the warm-up (and its ratio to DDP), from train.profile's step
profile the exposed parameter-gather and gradient-reduction waits per step, and per rank the
bytes of parameters + gradients + optimizer state held at the busiest moment and the peak
resident memory. The share of the gathers ZeRO-3's prefetch hides is 1 - (gather wait with
prefetch) / (gather wait without): without a prefetch a unit waits for its whole gather.
Run from the repository root after a build and scripts/quickstart.sh (the fortunes data):

    /usr/bin/python3 bench/fsdp_strategies.py --ranks 2 --steps 30 --repeats 3
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

STRATEGIES = [("no_shard", True), ("optim", True), ("optim_grads", True), ("optim_grads_params", True),
              ("optim_grads_params", False)]


def run(ranks, strategy, prefetch, steps, out):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    options = json.dumps({"strategy": strategy, "prefetch": prefetch})
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), "-x", "OMP_NUM_THREADS",
           "build/bin/plexus-train", "--config", "configs/default.json", "--set", f"run.output_dir={out}",
           "--set", f"train.steps={steps}", "--set", "train.eval_interval=0", "--set", "train.profile=true",
           "--set", f"train.log_interval={steps}", "--set", "sample.tokens=0",
           "--set", f"distributed.data_parallel.options={options}"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    warm = max(1, steps // 3)
    steps_after = [r for r in records if r["event"] == "step" and r["step"] > warm]
    profile = [r for r in records if r["event"] == "profile"][-1]
    parts = {p["part"]: p for p in profile["parts"]}

    def wait(name):
        p = parts.get(name)
        return 0.0 if p is None else sum(p.get(k, 0.0) for k in ("forward_ms", "backward_ms", "update_ms"))

    memory = steps_after[-1]["memory_per_rank"]
    held = max(m["peak_parameter_and_gradient_bytes"] + m["optimizer_bytes"] for m in memory)
    resident = max(m["peak_resident_bytes"] for m in memory)
    return (statistics.median(r["tokens_per_s"] for r in steps_after), wait("parameter gather (wait)"),
            wait("gradient reduction (wait)"), held, resident)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for i, (strategy, prefetch) in enumerate(STRATEGIES):
                out = os.path.join(tmp, f"{strategy}{int(prefetch)}-{repeat}")
                results.setdefault(i, []).append(run(args.ranks, strategy, prefetch, args.steps, out))
    median = {i: [statistics.median(r[k] for r in rs) for k in range(5)] for i, rs in results.items()}
    base = median[0][0]
    print(f"| strategy ({args.ranks} ranks) | tokens/s | vs DDP | gather wait ms/step | reduction wait ms/step "
          "| params+grads+optimizer held (MiB) | peak resident (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for i, (strategy, prefetch) in enumerate(STRATEGIES):
        tps, gather, reduce, held, resident = median[i]
        label = strategy + ("" if prefetch else ", no prefetch")
        print(f"| {label} | {tps:,.0f} | {tps / base:.3f} | {gather:.2f} | {reduce:.2f} | {held / 2**20:.2f} "
              f"| {resident / 2**20:.0f} |")
    with_prefetch, without = median[3][1], median[4][1]
    if without > 0:
        print(f"\nZeRO-3's prefetch hides {100 * (1 - with_prefetch / without):.0f}% of the parameter-gather wait "
              f"({with_prefetch:.2f} ms/step exposed against {without:.2f} without prefetch).")


if __name__ == "__main__":
    main()

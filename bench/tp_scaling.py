#!/usr/bin/env python3
"""Tensor parallelism on this machine's cores: the same model and global batch trained by one
process (one thread, then every core) and by tp ranks under mpirun (one thread each), with what
each rank holds.

  /usr/bin/python3 bench/tp_scaling.py --data PREFIX [--tp 2] [--steps 30] [--repeats 3] [--moe]

With --moe every MLP is an MoE layer (8 experts, top 2), and the tp runs are with sequence
parallelism (which MoE needs at tp > 1): the experts whole on every tp rank (expert_tp 1) and
split over expert_tp = tp.

PREFIX is a dataset of `plexus data prepare` (the byte tokenizer's 256 ids). Prints per run the
median step time and tokens/s over steps 11.. (the median of --repeats runs), rank 0's bytes of
parameters, gradients and AdamW moments, its peak resident memory, and the tp group's payload
per step from the step records (all-reduces; with sequence parallelism gathers and scatters too).
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
MODEL = ["model.num_layers=4", "model.hidden_size=256", "model.num_attention_heads=8", "model.seq_length=256",
         "train.micro_batch_size=8", "train.microbatches=2", "optimizer.clip_grad=1.0"]


MOE = ["plugins.load=[\"sequential_scheduler\", \"transformer\", \"moe\"]", "model.moe.layer_freq=1",
       "model.moe.options={\"num_moe_experts\": 8, \"moe_router_topk\": 2, \"moe_aux_loss_coeff\": 0.01}"]


def run(label, tp, threads, args, out_root, sequence_parallel=False, expert_tp=None):
    out = os.path.join(out_root, label)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [TRAIN, "--set", f"data.path={args.data}", "--set", f"run.output_dir={out}", "--set",
           f"train.steps={args.steps}", "--set", "train.eval_interval=0", "--set", "sample.tokens=0",
           "--set", "checkpoint.interval=0", "--set", "run.adapt_threads=false"]
    for key in MODEL + (MOE if args.moe else []):
        cmd += ["--set", key]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if sequence_parallel:
        cmd += ["--set", "model.sequence_parallel=true"]
    if tp > 1:
        etp = "" if expert_tp is None else ', "expert_tp": %d' % expert_tp
        cmd += ["--set", "distributed.topology.options={\"tp\": %d%s}" % (tp, etp)]
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(tp), "-x", "OMP_NUM_THREADS"] + cmd
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        sys.exit(f"tp_scaling.py: {label} failed:\n{done.stdout}{done.stderr}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    steps = [r for r in records if r["event"] == "step"][10:]
    memory = [r for r in records if r["event"] == "step" and "memory_per_rank" in r][-1]["memory_per_rank"][0]
    tp_calls = steps[-1].get("comm", {}).get("tp", {})  # all-reduces, and under SP gathers and scatters
    comm = {"calls": sum(c["calls"] for c in tp_calls.values()), "bytes": sum(c["bytes"] for c in tp_calls.values())}
    return {
        "ms": statistics.median(r["step_seconds"] for r in steps) * 1e3,
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps),
        "state_mb": (memory["parameter_bytes"] + memory["gradient_bytes"] + memory["optimizer_bytes"]) / 2**20,
        "resident_mb": memory["peak_resident_bytes"] / 2**20,
        "tp_mb": comm["bytes"] / 2**20,
        "tp_calls": comm["calls"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--moe", action="store_true", help="MoE layers; tp runs with and without expert tensor parallelism")
    args = ap.parse_args()
    if args.steps <= 10:
        sys.exit("tp_scaling.py: --steps must exceed 10 (the first 10 are warm-up)")
    cores = os.cpu_count() or 1
    runs = [("tp 1, 1 thread", 1, 1, False, None), (f"tp 1, {cores} threads", 1, cores, False, None)]
    if args.moe:
        runs += [(f"tp {args.tp} + SP, expert_tp 1", args.tp, 1, True, 1),
                 (f"tp {args.tp} + SP, expert_tp {args.tp}", args.tp, 1, True, args.tp)]
    else:
        runs += [(f"tp {args.tp}, {args.tp} ranks x 1 thread", args.tp, 1, False, None),
                 (f"tp {args.tp} + SP, {args.tp} ranks x 1 thread", args.tp, 1, True, None)]
    with tempfile.TemporaryDirectory() as out_root:
        results = {label: [] for label, *_ in runs}
        for _ in range(args.repeats):  # interleaved, so a slow spell of the machine hits every run
            for label, tp, threads, sp, etp in runs:
                name = label.replace(" ", "_").replace(",", "").replace("+", "")
                results[label].append(run(name, tp, threads, args, out_root, sp, etp))
    print("model: " + ", ".join(MODEL + (MOE if args.moe else [])))
    print(f"{'run':<33} {'step ms':>8} {'tokens/s':>9} {'state MiB/rank':>15} {'peak RSS MiB':>13} "
          f"{'tp MiB/step':>12} {'calls':>6}")
    for label, *_ in runs:
        rs = results[label]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"{label:<33} {med['ms']:8.1f} {med['tokens_per_s']:9.0f} {med['state_mb']:15.2f} "
              f"{med['resident_mb']:13.1f} {med['tp_mb']:12.2f} {med['tp_calls']:6.0f}")


if __name__ == "__main__":
    main()

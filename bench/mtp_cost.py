#!/usr/bin/env python3
"""What multi-token prediction costs and gives on this machine: the same GPT trained with 0, 1 and
2 MTP depths (model.mtp_num_layers) on the same data, steps and threads; per depth count the
median tokens/s over the steps after the first ten, the model FLOPs per token the run reports
(the depths' included), their ratios to no MTP, and the validation loss at the end (the main
model's; MTP is a training signal only).

  /usr/bin/python3 bench/mtp_cost.py [--build build] [--data PREFIX] [--steps 600] [--rounds 1]
      [--depths 0,1,2] [--json FILE]

Rounds run every depth count once, in turn; the report takes the median over rounds. The corpus
is --data, else Debian's fortunes prepared once (scripts/lib/fortunes.sh). The model is
configs/default.json's (4 layers, hidden 128, sequence 128); any --set after `--` is passed on.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def corpus(args, scratch):
    if args.data:
        return args.data
    prefix = pathlib.Path(scratch) / "fortunes"
    script = f'source "{ROOT}/scripts/lib/fortunes.sh" && prepare_fortunes "{args.build}/bin/plexus" "{prefix}"'
    subprocess.run(["bash", "-c", script], check=True)
    return str(prefix)


def train(args, data, depths, out):
    sets = {"data.path": data, "run.output_dir": str(out), "model.mtp_num_layers": depths,
            "train.steps": args.steps, "train.eval_interval": args.steps, "sample.tokens": 0,
            "checkpoint.interval": 0, "train.log_interval": 1000}
    command = [str(args.build / "bin" / "plexus-train"), "--config", str(ROOT / "configs" / "default.json")]
    for key, value in sets.items():
        command += ["--set", f"{key}={value}"]
    for extra in args.extra:
        command += ["--set", extra]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = [json.loads(line) for line in open(out / "metrics.jsonl")]
    steps = [r for r in records if r["event"] == "step"][10:]
    evals = [r for r in records if r["event"] == "eval"]
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps),
            "gflops_per_s": statistics.median(r["gflops_per_s"] for r in steps),
            "val_loss": evals[-1]["val_loss"],
            "mtp_losses": steps[-1].get("mtp_losses", [])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--data")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--depths", default="0,1,2")
    ap.add_argument("--json")
    ap.add_argument("extra", nargs="*", help="KEY=VALUE settings for every run (after --)")
    args = ap.parse_args()
    depth_counts = [int(d) for d in args.depths.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        data = corpus(args, scratch)
        runs = {d: [] for d in depth_counts}
        for r in range(args.rounds):
            for d in depth_counts:
                runs[d].append(train(args, data, d, pathlib.Path(scratch) / f"r{r}_mtp{d}"))
    result = {}
    for d in depth_counts:
        result[d] = {key: statistics.median(run[key] for run in runs[d])
                     for key in ("tokens_per_s", "gflops_per_s", "val_loss")}
        result[d]["flops_per_token"] = result[d]["gflops_per_s"] * 1e9 / result[d]["tokens_per_s"]
        result[d]["mtp_losses"] = runs[d][-1]["mtp_losses"]
    base = result[depth_counts[0]]
    print(f"{'MTP depths':>10} {'tokens/s':>10} {'ratio':>6} {'FLOPs/token':>12} {'ratio':>6} "
          f"{'GFLOP/s':>8} {'val_loss':>9}  last step's MTP losses")
    for d in depth_counts:
        r = result[d]
        print(f"{d:>10} {r['tokens_per_s']:>10.0f} {r['tokens_per_s'] / base['tokens_per_s']:>6.2f} "
              f"{r['flops_per_token'] / 1e6:>11.2f}M {r['flops_per_token'] / base['flops_per_token']:>6.2f} "
              f"{r['gflops_per_s']:>8.1f} {r['val_loss']:>9.4f}  "
              + ", ".join(f"{x:.3f}" for x in r["mtp_losses"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

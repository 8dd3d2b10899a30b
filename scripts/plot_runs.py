#!/usr/bin/env python3
"""Plots the validation loss of several plexus-train runs in one PNG, and prints a Markdown table
(final validation loss, median tokens/s, parameters) of them.

  /usr/bin/python3 scripts/plot_runs.py --out docs/figures/hybrid_vs_gpt.png \
      --title "..." LABEL=RUN_DIR [LABEL=RUN_DIR ...]

RUN_DIR is a run's output directory (its metrics.jsonl is read). The plot is drawn with Pillow
(Debian: python3-pil).
"""
import argparse
import json
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def read_run(run_dir):
    evals, rates, start = [], [], {}
    with open(pathlib.Path(run_dir) / "metrics.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r["event"] == "eval":
                evals.append((r["step"], r["val_loss"]))
            elif r["event"] == "step" and r["step"] > 5:  # the first steps warm caches up
                rates.append(r["tokens_per_s"])
            elif r["event"] == "start":
                start = r
    if not evals:
        sys.exit(f"plot_runs: {run_dir}/metrics.jsonl has no eval records")
    return {"evals": evals, "tokens_per_second": statistics.median(rates) if rates else float("nan"),
            "parameters": start.get("parameters")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, required=True, help="the PNG to write")
    ap.add_argument("--title", default="validation loss")
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    args = ap.parse_args()
    runs = {}
    for item in args.runs:
        label, sep, run_dir = item.partition("=")
        if not sep:
            sys.exit(f"plot_runs: expected LABEL=RUN_DIR, got '{item}'")
        runs[label] = read_run(run_dir)
    sys.path.insert(0, str(ROOT / "scripts" / "lib"))
    from line_plot import line_plot
    line_plot({label: r["evals"] for label, r in runs.items()}, args.out, args.title, "training step",
              "validation loss (nats/token)")
    print("| run | parameters | final validation loss | median tokens/s |")
    print("|---|---|---|---|")
    for label, r in runs.items():
        step, loss = r["evals"][-1]
        print(f"| {label} | {r['parameters']:,} | {loss:.4f} (step {step}) | {r['tokens_per_second']:,.0f} |")


if __name__ == "__main__":
    main()

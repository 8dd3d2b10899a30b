#!/usr/bin/env python3
"""Trains the baseline GPT and the same GPT with mHC, same seed, same tokens, and compares them:
validation-loss curves in one PNG, a Markdown table, and the tokens/s cost of mHC.

  /usr/bin/python3 scripts/mhc_compare.py --text corpus.txt [--config configs/gpt_mhc.json]
      [--steps 600] [--eval-interval 50] [--set key=value ...] [--out docs/figures/mhc]

--text prepares a byte-level dataset from any UTF-8 text file (or give --data PREFIX of a
prepared one). The two runs share the config, the seed and so the initial weights of every
layer and the order of the training windows; they differ only in mhc.enabled. Both run with the
same thread count (OMP_NUM_THREADS, default 2). Writes OUT.png, OUT.md and OUT.json.
The plot is drawn with Pillow (Debian: python3-pil); without it the table is still written.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(cmd, env=None):
    # errors="replace": plexus-train's sample prints the model's bytes as they come, and an
    # untrained byte-level model's are not always UTF-8.
    result = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
    if result.returncode != 0:
        sys.exit(f"mhc_compare: `{' '.join(map(str, cmd))}` failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return result


def train(args, data, out_dir, mhc_enabled):
    cmd = [str(args.build / "bin" / "plexus-train"), "--config", str(args.config)]
    overrides = args.set + [f"data.path={data}", f"run.output_dir={out_dir}", f"train.steps={args.steps}",
                            f"train.eval_interval={args.eval_interval}", f"mhc.enabled={'true' if mhc_enabled else 'false'}",
                            "checkpoint.interval=0", "train.log_interval=10"]
    for s in overrides:
        cmd += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    print(("mHC" if mhc_enabled else "baseline") + ": " + " ".join(cmd), flush=True)
    run(cmd, env)
    evals, seconds, start = [], [], None
    with open(pathlib.Path(out_dir) / "metrics.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r["event"] == "eval":
                evals.append((r["step"], r["val_loss"]))
            elif r["event"] == "step" and r["step"] > 5:  # the first steps warm caches up
                seconds.append(r["step_seconds"])
            elif r["event"] == "start":
                start = r
    return {"evals": evals, "median_step_seconds": statistics.median(seconds), "parameters": start["parameters"]}


def plot(results, png, title):
    sys.path.insert(0, str(ROOT / "scripts" / "lib"))
    try:
        from line_plot import line_plot
    except ImportError:
        print("Pillow is not installed (Debian: python3-pil): no plot written")
        return False
    line_plot({label: r["evals"] for label, r in results.items()}, png, title, "training step",
              "validation loss (nats/token)")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", type=pathlib.Path, help="a UTF-8 text file to prepare and train on")
    src.add_argument("--data", help="the prefix of a prepared dataset")
    ap.add_argument("--config", type=pathlib.Path, default=ROOT / "configs" / "gpt_mhc.json")
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--eval-interval", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="config override for both runs")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "figures" / "mhc_vs_baseline")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="plexus-mhc-") as work:
        data = args.data
        if args.text:
            data = str(pathlib.Path(work) / "corpus")
            run([str(args.build / "bin" / "plexus"), "data", "prepare", "--input", str(args.text), "--output-prefix", data])
        results = {"baseline (residual)": train(args, data, pathlib.Path(work) / "baseline", False),
                   "mHC": train(args, data, pathlib.Path(work) / "mhc", True)}
        info = json.loads(run([str(args.build / "bin" / "plexus"), "data", "inspect", "--json", data]).stdout)

    config = json.loads(run([str(args.build / "bin" / "plexus"), "config", "show", str(args.config)] +
                            sum((["--set", s] for s in args.set), [])).stdout)
    m, hc, t = config["model"], config["mhc"], config["train"]
    tokens_per_step = t["micro_batch_size"] * m["seq_length"] * t["microbatches"]
    base, mhc = results["baseline (residual)"], results["mHC"]
    cost = mhc["median_step_seconds"] / base["median_step_seconds"] - 1
    corpus = args.text.name if args.text else args.data
    title = (f"{corpus}: {m['num_layers']} layers, C={m['hidden_size']}, {args.steps} steps x {tokens_per_step} tokens; "
             f"mHC n={hc['num_residual_streams']}, K={hc['sinkhorn_iterations']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plotted = plot(results, args.out.with_suffix(".png"), title)

    lines = [f"Corpus: {corpus} ({info['token_count']} tokens, unigram entropy "
             f"{info['unigram_entropy_nats']:.3f} nats). {title}.", "",
             "| step | baseline val loss | mHC val loss | difference |", "|---:|---:|---:|---:|"]
    for (step, b), (_, h) in zip(base["evals"], mhc["evals"]):
        lines.append(f"| {step} | {b:.4f} | {h:.4f} | {h - b:+.4f} |")
    lines += ["", "| | parameters | median step | tokens/s |", "|---|---:|---:|---:|"]
    for label, r in results.items():
        lines.append(f"| {label} | {r['parameters']:,} | {r['median_step_seconds'] * 1e3:.1f} ms | "
                     f"{tokens_per_step / r['median_step_seconds']:,.0f} |")
    lines += ["", f"mHC costs {cost * 100:+.1f}% time per step ({args.threads} threads, backend {hc['backend']})."]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    summary = {"corpus": corpus, "steps": args.steps, "tokens_per_step": tokens_per_step, "config": str(args.config),
               "overrides": args.set, "threads": args.threads, "mhc": hc, "results": results, "step_time_cost": cost}
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {args.out.with_suffix('.md')}, {args.out.with_suffix('.json')}" +
          (f", {args.out.with_suffix('.png')}" if plotted else ""))


if __name__ == "__main__":
    main()

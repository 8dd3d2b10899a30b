#!/usr/bin/env python3
"""Training throughput of a MIMO model (configs/mimo_digits.json: a vision encoder feeding a GPT,
docs/mimo.md) in plexus-train against the same model in PyTorch, side by side.

Both sides train the encoder and the language model together with the same micro-batch, sequence
length, microbatches per step and thread count: forward, backward, one gradient clip over both
modules and an AdamW step, float32 on the CPU, one process. The PyTorch peers
(bench/torch_mimo_peer.py, each in a process of its own, set up as bench/torch_train_peer.py
sets up the GPT: one thread pool, subnormals flushed, F.scaled_dot_product_attention and
F.rms_norm, fused AdamW; their parameter counts checked against plexus model show's per module):
  eager    current PyTorch from PyPI (MKL), eager
  compile  the same through torch.compile (inductor)
Both need the venv scripts/bench-env.sh creates (.venv-bench); Debian's torch (1.13) has no
scaled_dot_product_attention. Runs alternate (Plexus, each peer, Plexus, ...). Reported: each
side's setup, the median seconds per step after warm-up steps, tokens/s (the language model's
tokens: samples x seq_length) and the ratio against each peer.

  /usr/bin/python3 bench/mimo_vs_torch.py [--config configs/mimo_digits.json] [--threads 2]
      [--steps 30] [--warmup 5] [--repeats 3] [--peers eager,compile] [--set key=value ...]
      [--json result.json]

Needs a built tree (scripts/build.sh) and the digits dataset (scripts/fetch-digits.sh build/data,
then plexus data digits; see docs/mimo.md). Run it with the system python.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

import train_vs_torch as harness

ROOT = pathlib.Path(__file__).resolve().parent.parent


def module_parameters(args):
    """Each module's parameters as plexus-train builds them (plexus model show --json)."""
    cmd = [str(args.build / "bin" / "plexus"), "model", "show", "--json", "--config", str(args.config)]
    for s in args.set:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"mimo_vs_torch: `{' '.join(cmd)}` failed:\n{out.stderr}")
    return {m["module"]: m["parameters"] for m in json.loads(out.stdout)["modules"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=pathlib.Path, default=ROOT / "configs" / "mimo_digits.json")
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps at the start of each run")
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs per side")
    ap.add_argument("--set", action="append", default=[], help="config override, as plexus-train --set")
    ap.add_argument("--peers", default="eager,compile", help="PyTorch peers, comma-separated: eager, compile")
    ap.add_argument("--bench-venv", type=pathlib.Path, default=ROOT / ".venv-bench",
                    help="the venv with PyPI's torch (scripts/bench-env.sh)")
    ap.add_argument("--json", type=pathlib.Path, help="also write the result here")
    args = ap.parse_args()
    args.device, args.precision = "cpu", "fp32"  # what the shared harness asks of the plexus-train run

    config = harness.resolved_config(args)
    data = pathlib.Path(str(config["data"]["path"]))
    if not data.is_absolute():  # the config's path is the repository's (build/data/digits)
        data = ROOT / data
        args.set.append(f"data.path={data}")
    m, t = config["model"], config["train"]
    image = next(iter(config["mimo"]["modules"]))
    tokens_per_image = None
    manifest = pathlib.Path(str(data) + ".mimo.json")
    if manifest.exists():
        tokens_per_image = json.loads(manifest.read_text())["modalities"][image["name"]]["tokens_per_sample"]
    if tokens_per_image is None:
        sys.exit(f"mimo_vs_torch: no {manifest} (prepare the digits dataset: docs/mimo.md)")
    # The dataset's layout: <bos>, then the image's tokens, then the text.
    extra = {"parameters": module_parameters(args), "image_tokens": [1, 1 + tokens_per_image]}
    tokens_per_step = t["micro_batch_size"] * m["seq_length"] * t["microbatches"]
    peers = harness.available_peers(args)
    runs = {"plexus": [], **{peer: [] for peer in peers}}
    setups = {"plexus": f"plexus-train, OMP_NUM_THREADS={args.threads} (OpenMP pool, OpenBLAS single-threaded in it)"}
    with tempfile.TemporaryDirectory(prefix="plexus-mimo-bench-") as workdir:
        for r in range(args.repeats):
            runs["plexus"].append(harness.plexus_step_seconds(args, workdir))
            line = f"repeat {r + 1}/{args.repeats}: plexus {statistics.median(runs['plexus'][-1]) * 1e3:.2f}"
            for peer in peers:
                seconds, setups[peer] = harness.torch_step_seconds(args, config, peer, workdir,
                                                                   "torch_mimo_peer.py", extra)
                runs[peer].append(seconds)
                line += f", {peer} {statistics.median(seconds) * 1e3:.2f}"
            print(line + " ms/step", flush=True)

    result = {"config": str(args.config), "overrides": args.set, "threads": args.threads,
              "tokens_per_step": tokens_per_step, "steps_timed": args.steps, "repeats": args.repeats,
              "parameters": extra["parameters"], "setups": setups}
    print(f"\nMIMO: encoder {extra['parameters']['images']} parameters, language model "
          f"{extra['parameters']['language']}; micro-batch {t['micro_batch_size']} x {t['microbatches']}, "
          f"seq {m['seq_length']}; {args.threads} threads")
    for side, setup in setups.items():
        print(f"  {side}: {setup}")
    print(f"{'':8} {'ms/step':>9} {'(spread)':>17} {'tokens/s':>10}")
    for side, per_run in runs.items():
        median = statistics.median([x for run in per_run for x in run])
        run_medians = [statistics.median(run) for run in per_run]
        result[side] = {"median_step_seconds": median, "tokens_per_s": tokens_per_step / median,
                        "run_medians": run_medians}
        print(f"{side:8} {median * 1e3:9.2f} {f'[{min(run_medians) * 1e3:.2f}, {max(run_medians) * 1e3:.2f}]':>17} "
              f"{tokens_per_step / median:10.0f}")
    result["ratios"] = {}
    for peer in peers:
        ratio = result[peer]["median_step_seconds"] / result["plexus"]["median_step_seconds"]
        result["ratios"][peer] = ratio
        print(f"ratio against {peer} (Plexus tokens/s / its tokens/s): {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The MIMO proof task's figure (docs/mimo.md): configs/mimo_digits.json trained twice, with the
image and with the encoder's outputs zeroed (mimo.zero_modalities), its held-out accuracy
evaluated every 50 steps, drawn as two curves.

  /usr/bin/python3 scripts/mimo_digits_figure.py --data PREFIX [--png docs/figures/mimo_digits.png]

PREFIX is the dataset of `plexus data digits`. Prints each run's final accuracy and loss, its
wall time, and the example predictions of its last evaluation.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "lib"))
from line_plot import line_plot  # noqa: E402

REPO = ROOT.parent
TRAIN = REPO / "build" / "bin" / "plexus-train"


def train(data, out, extra):
    command = [str(TRAIN), "--config", str(REPO / "configs" / "mimo_digits.json"), "--set", f"data.path={data}",
               "--set", f"run.output_dir={out}", "--set", "train.eval_interval=50"] + extra
    began = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.monotonic() - began
    records = [json.loads(line) for line in open(out / "metrics.jsonl")]
    return [r for r in records if r["event"] == "eval"], seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--png", default=str(REPO / "docs" / "figures" / "mimo_digits.png"))
    args = parser.parse_args()
    series = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in (("image + text", []), ("text only",
                                                       ["--set", "mimo.zero_modalities=true"])):
            evals, seconds = train(args.data, pathlib.Path(tmp) / label.split()[0], extra)
            last = evals[-1]
            print(f"{label}: step {last['step']}: val_accuracy {last['val_accuracy']:.4f}, "
                  f"val_loss {last['val_loss']:.4f} ({last['val_samples']} held-out samples), {seconds:.1f} s")
            print("  " + ", ".join(f"{e['sample']}: {e['predicted']}" +
                                   ("" if e["predicted"] == e["expected"] else f" (is {e['expected']})")
                                   for e in last["examples"]))
            series[label] = [(e["step"], 100.0 * e["val_accuracy"]) for e in evals]
    line_plot(series, args.png, "MIMO on 8x8 digits: held-out digits named", "step", "accuracy (%)")
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()

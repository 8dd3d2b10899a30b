#!/usr/bin/env python3
"""Context parallelism's memory: the peak resident memory of each rank for a sequence length and
cp, measured by training (the step records' memory_per_rank), and the attention's compute and
wait per call (the ring's transfers not hidden under the computation).

  /usr/bin/python3 bench/cp_memory.py --data PREFIX [--cp 1 2 4] [--seq 1024 2048 4096 8192]
                                      [--png docs/figures/context_parallel_memory.png]

PREFIX is a dataset of `plexus data prepare` (byte tokens) with enough validation tokens for one
sequence of the longest length. Each run trains 3 steps of 4 layers of 128 in 8 heads on one
sequence per step, one OpenMP thread per rank (cp > 1 under mpirun). Prints a table (the largest
rank's peak, the median tokens/s and per-call times of steps 2..3) and draws the peaks against
the sequence length, one line per cp.
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRAIN = ROOT / "build" / "bin" / "plexus-train"
MODEL = ["model.num_layers=4", "model.hidden_size=128", "model.num_attention_heads=8", "train.micro_batch_size=1",
         "train.steps=3", "train.eval_interval=0", "train.eval_iters=1", "sample.tokens=0", "train.log_interval=1",
         "checkpoint.interval=0", "run.adapt_threads=false", "data.split=80,20,0"]


def run(data, cp, seq, work):
    out = work / f"cp{cp}_seq{seq}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(TRAIN), "--set", f"data.path={data}", "--set", f"run.output_dir={out}", "--set",
           f"model.seq_length={seq}"]
    for key in MODEL:
        cmd += ["--set", key]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if cp > 1:
        cmd += ["--set", "distributed.topology.options={\"cp\": %d}" % cp]
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(cp), "-x", "OMP_NUM_THREADS"] + cmd
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        sys.exit(f"cp_memory.py: cp {cp} seq {seq} failed:\n{done.stdout}{done.stderr}")
    records = [json.loads(line) for line in open(out / "metrics.jsonl")]
    steps = [r for r in records if r["event"] == "step"]
    peak = max(m["peak_resident_bytes"] for m in steps[-1]["memory_per_rank"]) / 2**20
    later = steps[1:]
    median = lambda key: statistics.median(r[key] for r in later) if key in later[0] else None
    return {"cp": cp, "seq": seq, "peak_mib": peak, "tokens_per_s": median("tokens_per_s"),
            **{k: median("transformer/" + k) for k in
               ("cp_forward_compute_ms", "cp_forward_wait_ms", "cp_backward_compute_ms", "cp_backward_wait_ms")}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--cp", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--seq", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--png", type=pathlib.Path, default=ROOT / "docs" / "figures" / "context_parallel_memory.png")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="plexus-cp-") as work:
        for cp in args.cp:
            for seq in args.seq:
                rows.append(run(args.data, cp, seq, pathlib.Path(work)))
                r = rows[-1]
                fmt = lambda v: "-" if v is None else f"{v:.1f}"
                print(f"cp {cp}  seq {seq:6d}  peak {r['peak_mib']:8.0f} MiB  {fmt(r['tokens_per_s'])} tokens/s  "
                      f"forward {fmt(r['cp_forward_compute_ms'])} / {fmt(r['cp_forward_wait_ms'])} ms  "
                      f"backward {fmt(r['cp_backward_compute_ms'])} / {fmt(r['cp_backward_wait_ms'])} ms", flush=True)
    sys.path.insert(0, str(ROOT / "scripts" / "lib"))
    try:
        from line_plot import line_plot
    except ImportError:
        print("Pillow is not installed (Debian: python3-pil): no plot written")
        return
    series = {f"cp = {cp}": [(r["seq"], r["peak_mib"]) for r in rows if r["cp"] == cp] for cp in args.cp}
    line_plot(series, args.png, "Peak resident memory per rank (4 layers of 128, 8 heads, float32)",
              "sequence length (tokens)", "MiB (the largest rank)")
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()

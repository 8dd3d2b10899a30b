#!/usr/bin/env python3
"""Pipeline parallelism on this machine's cores: tokens/s of the same model and global batch at
pp = 1, 2 and 4, with and without virtual stages, and the bubble measured from each run's trace
(train.trace; scripts/plot_trace.py) against the theory (P-1)/(V*M+P-1).

  /usr/bin/python3 bench/pipeline_bubble.py [--build build] [--data PREFIX] [--rounds 3]
      [--steps 12] [--cores 2] [--layers 8] [--microbatches 8] [--figures DIR] [--json FILE]

Every configuration uses the same cores: pp = 1 runs one process with --cores threads; pp = P runs
P processes of max(1, cores / P) threads each (more processes than cores are oversubscribed, and
the bubble of such a run is diluted by the ranks sharing cores; the table says so). Each round
runs every configuration once, in turn; the report gives the median over rounds of each run's
median step time (steps after the first three) and of its measured bubble. The corpus is --data,
else Debian's fortunes prepared once (scripts/lib/fortunes.sh). With --figures the traces of the
last round are drawn there as pipeline_<name>.png.
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
sys.path.insert(0, str(ROOT / "scripts"))
import plot_trace  # noqa: E402  (the trace reader and the bubble)

CONFIGS = [  # name, pp, virtual stages, scheduler
    ("pp1", 1, 1, "1f1b"),
    ("pp2", 2, 1, "1f1b"),
    ("pp2_vpp2", 2, 2, "interleaved_1f1b"),
    ("pp4", 4, 1, "1f1b"),
    ("pp4_vpp2", 4, 2, "interleaved_1f1b"),
]


def corpus(args, scratch):
    if args.data:
        return args.data
    prefix = pathlib.Path(scratch) / "fortunes"
    script = f'source "{ROOT}/scripts/lib/fortunes.sh" && prepare_fortunes "{args.build}/bin/plexus" "{prefix}"'
    subprocess.run(["bash", "-c", script], check=True)
    return str(prefix)


def run(args, data, name, pp, vpp, scheduler, out):
    threads = args.cores if pp == 1 else max(1, args.cores // pp)
    sets = {
        "data.path": data, "run.output_dir": str(out), "model.num_layers": args.layers,
        "train.microbatches": args.microbatches, "train.micro_batch_size": args.micro_batch_size,
        "train.steps": args.steps, "train.eval_interval": 0, "train.eval_iters": 1, "sample.tokens": 0,
        "checkpoint.interval": 0, "scheduler.component": scheduler, "train.log_interval": 1000,
        "train.trace.steps": args.steps - 3, "train.trace.first_step": 4,
        "plugins.load": json.dumps(["pipeline_schedules", "transformer"]),
        "distributed.topology.options": json.dumps({"pp": pp}),
        "distributed.pipeline.virtual_stages": vpp if pp > 1 else 0,
    }
    command = [str(args.build / "bin" / "plexus-train")]
    for key, value in sets.items():
        command += ["--set", f"{key}={value}"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if pp > 1:
        command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS",
                   "-np", str(pp)] + command
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"pipeline_bubble: {name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    seconds = [r["step_seconds"] for r in steps if r["event"] == "step" and r["step"] > 3]
    tokens = [r["tokens_per_s"] for r in steps if r["event"] == "step" and r["step"] > 3]
    _, spans, start = plot_trace.load(out)
    bubbles = plot_trace.bubbles(spans)
    return {"step_seconds": statistics.median(seconds), "tokens_per_s": statistics.median(tokens),
            "bubble": statistics.median(b["bubble"] for b in bubbles) if pp > 1 else 0.0,
            "theory": plot_trace.theory(start)["bubble"] if pp > 1 else 0.0, "threads": threads}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--data")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--figures", type=pathlib.Path)
    ap.add_argument("--json", type=pathlib.Path)
    args = ap.parse_args()
    args.build = args.build.resolve()
    results = {name: [] for name, *_ in CONFIGS}
    with tempfile.TemporaryDirectory() as scratch:
        data = corpus(args, scratch)
        for r in range(args.rounds):
            for name, pp, vpp, scheduler in CONFIGS:
                out = pathlib.Path(scratch) / f"{name}_{r}"
                results[name].append(run(args, data, name, pp, vpp, scheduler, out))
                if args.figures and r + 1 == args.rounds and pp > 1:
                    args.figures.mkdir(parents=True, exist_ok=True)
                    names, spans, _ = plot_trace.load(out)
                    b = results[name][-1]
                    plot_trace.draw(names, spans, 0, args.figures / f"pipeline_{name}.png",
                                    f"{name}: {args.layers} layers, M={args.microbatches}, one traced step; bubble "
                                    f"{b['bubble']:.2f}, theory {b['theory']:.2f}")
    base = statistics.median(x["tokens_per_s"] for x in results["pp1"])
    summary = {}
    print(f"{args.layers} layers, {args.microbatches} microbatches of {args.micro_batch_size}, {args.cores} cores, "
          f"{args.rounds} rounds")
    print("| run | processes x threads | tokens/s | vs pp=1 | bubble measured | theory (P-1)/(V*M+P-1) |")
    print("|---|---|---|---|---|---|")
    for name, pp, vpp, _ in CONFIGS:
        rows = results[name]
        s = {key: statistics.median(x[key] for x in rows) for key in ("tokens_per_s", "bubble", "theory", "step_seconds")}
        summary[name] = s
        over = " (oversubscribed)" if pp > args.cores else ""
        print(f"| {name} | {pp} x {rows[0]['threads']}{over} | {s['tokens_per_s']:,.0f} | {s['tokens_per_s'] / base:.2f} "
              f"| {s['bubble']:.3f} | {s['theory']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": summary}, indent=1))


if __name__ == "__main__":
    main()

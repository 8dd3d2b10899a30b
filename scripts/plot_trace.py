#!/usr/bin/env python3
"""Draws a plexus-train trace (train.trace; run.output_dir/trace.json) as a PNG timeline, one row
per rank, and measures the pipeline bubble of each traced step.

  /usr/bin/python3 scripts/plot_trace.py RUN_DIR [--out trace.png] [--step N] [--json]

RUN_DIR holds trace.json and metrics.jsonl (its "start" record gives the pipeline's stages,
virtual stages and microbatches). The bubble of a rank in a step is the part of its
forward-backward schedule ("pipeline schedule" span) in which it computed nothing: 1 - (forward
and backward time) / (schedule time). Theory, with equal stages and free transfers
(Narayanan et al. 2021): (P-1)/(M+P-1) for 1F1B, (P-1)/(V*M+P-1) interleaved over V virtual
stages. The plot is drawn with Pillow (Debian: python3-pil); the numbers need only the standard
library.
"""
import argparse
import json
import pathlib
import statistics
import sys

COMPUTE = ("forward", "backward")
COLORS = {"forward": (66, 133, 244), "backward": (52, 168, 83), "comm": (234, 67, 53), "update": (150, 150, 150)}


def load(run_dir):
    run_dir = pathlib.Path(run_dir)
    trace_file = run_dir / "trace.json"
    if not trace_file.exists():
        sys.exit(f"plot_trace: no {trace_file} (run plexus-train with --set train.trace.steps=N)")
    events = json.loads(trace_file.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    start = {}
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            record = json.loads(line)
            if record["event"] == "start":
                start = record
    return names, spans, start


def schedules(spans):
    """{pid: [(start, end) of each "pipeline schedule" span, in time order]}."""
    out = {}
    for s in spans:
        if s["cat"] == "step" and s["name"] == "pipeline schedule":
            out.setdefault(s["pid"], []).append((s["ts"], s["ts"] + s["dur"]))
    for windows in out.values():
        windows.sort()
    return out


def bubbles(spans):
    """[{pid, step index, schedule_us, compute_us, bubble}] for every rank and traced step."""
    rows = []
    for pid, windows in sorted(schedules(spans).items()):
        for i, (a, b) in enumerate(windows):
            busy = sum(s["dur"] for s in spans
                       if s["pid"] == pid and s["cat"] in COMPUTE and a <= s["ts"] and s["ts"] + s["dur"] <= b + 1e-3)
            rows.append({"rank": pid, "step": i, "schedule_us": b - a, "compute_us": busy,
                         "bubble": 1.0 - busy / (b - a) if b > a else 0.0})
    return rows


def theory(start):
    pipeline = start.get("pipeline")
    if not pipeline:
        return None
    p, v, m = pipeline["stages"], pipeline["virtual_stages"], pipeline["microbatches"]
    return {"stages": p, "virtual_stages": v, "microbatches": m, "bubble": (p - 1) / (v * m + p - 1)}


def blocks(spans, pid, a, b):
    """The rank's spans in [a, b], contiguous unit spans of one microbatch and chunk merged."""
    mine = sorted((s for s in spans if s["pid"] == pid and s["cat"] != "step" and a <= s["ts"] <= b),
                  key=lambda s: s["ts"])
    merged = []
    for s in mine:
        key = (s["cat"], s["args"].get("microbatch"), s["args"].get("chunk"))
        if merged and merged[-1]["key"] == key and s["ts"] - merged[-1]["end"] < 50:
            merged[-1]["end"] = s["ts"] + s["dur"]
        else:
            merged.append({"key": key, "start": s["ts"], "end": s["ts"] + s["dur"]})
    return merged


def draw(names, spans, step, out, title):
    from PIL import Image, ImageDraw, ImageFont

    def font(size):
        try:
            return ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", size)
        except OSError:
            return ImageFont.load_default()

    windows = schedules(spans)
    pids = sorted(windows)
    if any(step >= len(windows[p]) for p in pids):
        sys.exit(f"plot_trace: the trace holds {min(len(w) for w in windows.values())} steps; --step {step} is past them")
    a = min(windows[p][step][0] for p in pids)
    # The step on the plot: from the first schedule's start to the last rank's optimizer.
    b = max(s["ts"] + s["dur"] for s in spans
            if s["pid"] in pids and s["ts"] >= a and s["ts"] <= max(windows[p][step][1] for p in pids) + 1e6 and
            (s["cat"] in COMPUTE or s["cat"] in ("comm", "update")) and
            (step + 1 >= len(windows[s["pid"]]) or s["ts"] < windows[s["pid"]][step + 1][0]))
    width, left, right, top, row, gap = 1400, 190, 20, 60, 46, 14
    height = top + len(pids) * (row + gap) + 70
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    big, small = font(16), font(11)
    d.text((left, 18), title, fill="black", font=big)
    scale = (width - left - right) / (b - a)
    # A rank of several chunks (virtual stages) labels its blocks microbatch.chunk.
    interleaved = {pid: len({s["args"]["chunk"] for s in spans if s["pid"] == pid and "chunk" in s["args"]}) > 1
                   for pid in pids}
    for i, pid in enumerate(pids):
        y = top + i * (row + gap)
        d.text((10, y + row / 2 - 8), names.get(pid, f"rank {pid}"), fill="black", font=small)
        d.rectangle([left, y, width - right, y + row], outline=(200, 200, 200))
        for blk in blocks(spans, pid, a, b):
            cat, mb, chunk = blk["key"]
            x0, x1 = left + (blk["start"] - a) * scale, left + (blk["end"] - a) * scale
            inset = 0 if cat in COMPUTE else row * 0.3
            d.rectangle([x0, y + inset, max(x0 + 1, x1), y + row - inset], fill=COLORS.get(cat, (0, 0, 0)))
            if cat in COMPUTE and mb is not None and x1 - x0 > 14:
                label = f"{mb}.{chunk}" if interleaved[pid] else str(mb)
                d.text((x0 + 2, y + row / 2 - 6), label, fill="white", font=small)
    y = top + len(pids) * (row + gap) + 10
    x = left
    for cat, label in (("forward", "forward (microbatch, or microbatch.chunk)"), ("backward", "backward"),
                       ("comm", "waiting for a transfer or reduction"), ("update", "optimizer")):
        d.rectangle([x, y, x + 14, y + 14], fill=COLORS[cat])
        d.text((x + 20, y), label, fill="black", font=small)
        x += 60 + 8 * len(label)
    d.text((left, y + 26), f"{(b - a) / 1000:.1f} ms", fill="black", font=small)
    img.save(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path, help="the PNG to write (default: no plot)")
    ap.add_argument("--step", type=int, default=0, help="which traced step to draw, from 0")
    ap.add_argument("--title", default=None)
    ap.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = ap.parse_args()
    names, spans, start = load(args.run_dir)
    rows = bubbles(spans)
    if not rows:
        sys.exit("plot_trace: the trace has no \"pipeline schedule\" spans")
    expected = theory(start)
    measured = statistics.mean(r["bubble"] for r in rows)
    if args.json:
        print(json.dumps({"ranks": rows, "mean_bubble": measured, "theory": expected}))
    else:
        print("| rank | traced step | schedule (ms) | computing (ms) | bubble |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['rank']} | {r['step']} | {r['schedule_us'] / 1000:.2f} | {r['compute_us'] / 1000:.2f} | "
                  f"{r['bubble']:.3f} |")
        line = f"mean bubble {measured:.3f}"
        if expected:
            line += (f"; theory (P-1)/(V*M+P-1) = {expected['bubble']:.3f} with P={expected['stages']}, "
                     f"V={expected['virtual_stages']}, M={expected['microbatches']}")
        print(line)
    if args.out:
        title = args.title or (f"{args.run_dir.name}: step {args.step} of the trace, bubble {measured:.2f}"
                               + (f" (theory {expected['bubble']:.2f})" if expected else ""))
        draw(names, spans, args.step, args.out, title)


if __name__ == "__main__":
    main()

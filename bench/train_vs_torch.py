#!/usr/bin/env python3
"""Training throughput of plexus-train against the same model in PyTorch eager, side by side.

Both sides train the model of one run config (the default unless --config) with the same
micro-batch size, sequence length, microbatches per step and thread count: forward, backward,
gradient clipping and an AdamW step per training step, float32 on the CPU. The PyTorch side is
tests/reference/gpt_reference.py, the eager formulation the parity test checks Plexus against.
Runs alternate (Plexus, PyTorch, Plexus, ...) so drift of the machine hits both. Reported:
the median seconds per step after warm-up steps, tokens/s, and the ratio Plexus / PyTorch.

  /usr/bin/python3 bench/train_vs_torch.py [--config configs/default.json] [--threads 2]
      [--steps 30] [--warmup 5] [--repeats 3] [--device cpu|cuda] [--precision fp32|bf16]
      [--set key=value ...] [--json result.json]

With --device cuda both sides train on the GPU (Plexus with run.device=cuda, PyTorch with
tensors on cuda:0, each step timed after a device synchronization). --precision bf16 (GPU only)
trains Plexus with run.precision=bf16 and PyTorch under torch.autocast(dtype=torch.bfloat16),
PyTorch's own mixed precision: float32 parameters and optimizer, bf16 products.

Needs a built tree (scripts/build.sh) and the dataset the config names (scripts/quickstart.sh
prepares the default one). Run it with the system python, which sees Debian's python3-torch.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reference"))


def resolved_config(args):
    cmd = [str(args.build / "bin" / "plexus"), "config", "show", str(args.config)]
    for s in args.set:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"train_vs_torch: `{' '.join(cmd)}` failed:\n{out.stderr}")
    return json.loads(out.stdout)


def plexus_step_seconds(args, workdir):
    """One plexus-train run; the per-step wall times it recorded after the warm-up steps."""
    out_dir = pathlib.Path(workdir) / f"plexus-{time.monotonic_ns()}"
    cmd = [str(args.build / "bin" / "plexus-train"), "--config", str(args.config)]
    for s in args.set + [f"train.steps={args.warmup + args.steps}", "train.log_interval=1",
                         "train.eval_interval=0", "train.eval_iters=1", "checkpoint.interval=0",
                         "sample.tokens=0", f"run.output_dir={out_dir}", f"run.device={args.device}",
                         f"run.precision={args.precision}"]:
        cmd += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        sys.exit(f"train_vs_torch: plexus-train failed (exit {run.returncode}):\n{run.stderr[-4000:]}")
    seconds = []
    with open(out_dir / "metrics.jsonl") as f:
        for line in f:
            record = json.loads(line)
            if record.get("event") == "step" and record["step"] > args.warmup:
                seconds.append(record["step_seconds"])
    return seconds


def torch_step_seconds(args, config):
    import torch
    import gpt_reference as ref

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device("cuda:0" if args.device.startswith("cuda") else "cpu")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    m, o, t = config["model"], config["optimizer"], config["train"]
    c, f, v = m["hidden_size"], m["ffn_hidden_size"], m["vocab_size"]
    nh, ng = m["num_attention_heads"], m["num_query_groups"]
    hd = c // nh
    fc1_rows = 2 * f if m["activation"] == "swiglu" else f
    shapes = {"embedding.word_embeddings.weight": (v, c), "decoder.final_layernorm.weight": (c,)}
    for i in range(m["num_layers"]):
        p = f"decoder.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (c,), p + "pre_mlp_layernorm.weight": (c,),
                       p + "self_attention.linear_qkv.weight": ((nh + 2 * ng) * hd, c),
                       p + "self_attention.linear_proj.weight": (c, nh * hd),
                       p + "mlp.linear_fc1.weight": (fc1_rows, c), p + "mlp.linear_fc2.weight": (c, f)})
    if m["normalization"] == "LayerNorm":
        for name in [n for n in shapes if n.endswith("layernorm.weight")]:
            shapes[name[: -len("weight")] + "bias"] = shapes[name]
    if m["untie_embeddings_and_output_weights"]:
        shapes["output_layer.weight"] = (v, c)
    params = {}
    for name, shape in shapes.items():
        init = torch.ones(shape) if "layernorm.weight" in name else torch.randn(shape) * 0.02
        params[name] = init.to(device).requires_grad_(True)
    no_decay = [p for n, p in params.items() if "layernorm" in n]
    decay = [p for n, p in params.items() if "layernorm" not in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["adam_beta1"], o["adam_beta2"]), eps=o["adam_eps"])
    b, s, microbatches = t["micro_batch_size"], m["seq_length"], t["microbatches"]
    seconds = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, v, (microbatches, b, s), dtype=torch.int32).to(device)
        targets = torch.randint(0, v, (microbatches, b, s), dtype=torch.int32).to(device)
        sync()
        begin = time.perf_counter()
        opt.zero_grad()
        for mb in range(microbatches):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                loss = ref.forward(params, tokens[mb], targets[mb], m) / microbatches
            loss.backward()
        if o["clip_grad"] > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), o["clip_grad"])
        opt.step()
        sync()
        if step >= args.warmup:
            seconds.append(time.perf_counter() - begin)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=pathlib.Path, default=ROOT / "configs" / "default.json")
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (both sides)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="activations' precision (bf16 on a GPU only), both sides")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps at the start of each run")
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs per side")
    ap.add_argument("--set", action="append", default=[], help="config override, as plexus-train --set")
    ap.add_argument("--json", type=pathlib.Path, help="also write the result here")
    args = ap.parse_args()
    if args.precision == "bf16" and not args.device.startswith("cuda"):
        ap.error("--precision bf16 needs --device cuda (Plexus computes in float32 on the CPU)")

    config = resolved_config(args)
    m = config["model"]
    # 0 means "derive", as in the engine: as many query groups as heads, Megatron's default FFN
    # width (4C, or with swiglu int(8C / 3 / 64) * 64).
    m["num_query_groups"] = m["num_query_groups"] or m["num_attention_heads"]
    swiglu_ffn = int((4 * m["hidden_size"] * 2 / 3) / 64) * 64
    m["ffn_hidden_size"] = m["ffn_hidden_size"] or (swiglu_ffn if m["activation"] == "swiglu" else 4 * m["hidden_size"])
    t = config["train"]
    tokens_per_step = t["micro_batch_size"] * m["seq_length"] * t["microbatches"]
    runs = {"plexus": [], "torch": []}
    with tempfile.TemporaryDirectory(prefix="plexus-bench-") as workdir:
        for r in range(args.repeats):
            runs["plexus"].append(plexus_step_seconds(args, workdir))
            runs["torch"].append(torch_step_seconds(args, config))
            print(f"repeat {r + 1}/{args.repeats}: plexus {statistics.median(runs['plexus'][-1]) * 1e3:.1f} ms/step, "
                  f"torch {statistics.median(runs['torch'][-1]) * 1e3:.1f} ms/step", flush=True)

    result = {"config": str(args.config), "overrides": args.set, "threads": args.threads, "device": args.device,
              "precision": args.precision,
              "tokens_per_step": tokens_per_step, "steps_timed": args.steps, "repeats": args.repeats,
              "model": {k: m[k] for k in ("hidden_size", "num_layers", "num_attention_heads", "num_query_groups",
                                          "ffn_hidden_size", "seq_length", "vocab_size", "activation")},
              "micro_batch_size": t["micro_batch_size"], "microbatches": t["microbatches"]}
    print(f"\nmodel: {m['num_layers']} layers, C={m['hidden_size']}, FFN={m['ffn_hidden_size']}, "
          f"seq {m['seq_length']}, micro-batch {t['micro_batch_size']} x {t['microbatches']}; {args.threads} threads")
    print(f"{'':8} {'ms/step':>9} {'(spread)':>17} {'tokens/s':>10}")
    for side, per_run in runs.items():
        all_steps = [x for run in per_run for x in run]
        median = statistics.median(all_steps)
        run_medians = [statistics.median(run) for run in per_run]
        result[side] = {"median_step_seconds": median, "tokens_per_s": tokens_per_step / median,
                        "run_medians": run_medians}
        print(f"{side:8} {median * 1e3:9.1f} {f'[{min(run_medians) * 1e3:.1f}, {max(run_medians) * 1e3:.1f}]':>17} "
              f"{tokens_per_step / median:10.0f}")
    ratio = result["torch"]["median_step_seconds"] / result["plexus"]["median_step_seconds"]
    result["ratio"] = ratio
    print(f"ratio (Plexus tokens/s / PyTorch tokens/s): {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""One PyTorch peer of bench/train_vs_torch.py, in a process of its own: trains the GPT of a
resolved run config for warm-up + timed steps and prints the timed steps' seconds as JSON.

The peer is set up as someone who knows PyTorch would set it up for a CPU training run:
- one thread pool: torch.set_num_threads(threads), and the BLAS under it single-threaded
  (the parent sets OPENBLAS_NUM_THREADS=1 before this process starts, since OpenBLAS reads it
  once at load; a threaded OpenBLAS called from inside PyTorch's OpenMP pool oversubscribes the
  cores); subnormal floats flushed, as plexus-train does by default (run.flush_denormals);
- its fastest formulation that computes the same model: F.scaled_dot_product_attention with the
  causal flag, F.rms_norm, F.cross_entropy, where this torch has them (2.x); otherwise (Debian's
  1.13) the formulation of tests/reference/gpt_reference.py;
- AdamW with fused=True where the CPU supports it (torch >= 2.4), else foreach;
- mode "compile": the loss function through torch.compile (inductor, CPU), compiled during the
  warm-up steps, which are not timed.
Before timing, the fast forward's loss is checked against tests/reference/gpt_reference.py on
the same weights and tokens (relative 1e-5), so the peer is fast at the right model.

  python torch_train_peer.py SPEC.json      (SPEC: {"config": {...resolved...}, "threads": 2,
                                             "steps": 30, "warmup": 5, "mode": "eager"|"compile",
                                             "device": "cpu"|"cuda", "precision": "fp32"|"bf16"})
On "cuda" every step is timed after a device synchronization, and "bf16" runs the forward under
torch.autocast(dtype=bfloat16), PyTorch's own mixed precision (fp32 parameters and optimizer).
"""
import json
import math
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reference"))
import gpt_reference as ref  # noqa: E402

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
HAVE_RMS_NORM = hasattr(F, "rms_norm")


def norm(x, p, prefix, m):
    w = p[prefix + "weight"]
    if m["normalization"] == "RMSNorm":
        if HAVE_RMS_NORM:
            return F.rms_norm(x, (x.shape[-1],), w, m["layernorm_epsilon"])
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m["layernorm_epsilon"]) * w
    return F.layer_norm(x, (x.shape[-1],), w, p[prefix + "bias"], m["layernorm_epsilon"])


def rope_tables(s, hd, base, device):
    inv = base ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2.0 / hd)
    angle = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = angle.cos().float()[None, :, None, :], angle.sin().float()[None, :, None, :]
    return cos.to(device), sin.to(device)


def rope(x, cos, sin):
    hd = x.shape[-1]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(x, p, pre, m, cos, sin):
    b, s, c = x.shape
    nh, ng = m["num_attention_heads"], m["num_query_groups"]
    hd, per = c // nh, nh // ng
    u = norm(x, p, pre + "input_layernorm.", m)
    qkv = F.linear(u, p[pre + "self_attention.linear_qkv.weight"]).view(b, s, ng, per + 2, hd)
    q = rope(qkv[:, :, :, :per, :].reshape(b, s, nh, hd), cos, sin)
    k = rope(qkv[:, :, :, per, :], cos, sin)
    v = qkv[:, :, :, per + 1, :]
    if per > 1:
        k = k.repeat_interleave(per, dim=2)
        v = v.repeat_interleave(per, dim=2)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return F.linear(o.transpose(1, 2).reshape(b, s, nh * hd), p[pre + "self_attention.linear_proj.weight"])


def mlp(x, p, pre, m):
    u = norm(x, p, pre + "pre_mlp_layernorm.", m)
    a = F.linear(u, p[pre + "mlp.linear_fc1.weight"])
    if m["activation"] == "swiglu":
        f = m["ffn_hidden_size"]
        act = F.silu(a[..., :f]) * a[..., f:]
    else:
        act = F.gelu(a)
    return F.linear(act, p[pre + "mlp.linear_fc2.weight"])


def fast_forward(p, tokens, targets, m, cos, sin):
    x = F.embedding(tokens, p["embedding.word_embeddings.weight"])
    for i in range(m["num_layers"]):
        pre = f"decoder.layers.{i}."
        x = x + attention(x, p, pre, m, cos, sin)
        x = x + mlp(x, p, pre, m)
    y = norm(x, p, "decoder.final_layernorm.", m)
    head = "embedding.word_embeddings.weight" if not m["untie_embeddings_and_output_weights"] else "output_layer.weight"
    logits = F.linear(y, p[head])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def parameters(m, device):
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
    return {name: (torch.ones(shape) if "layernorm.weight" in name else torch.randn(shape) * 0.02)
            .to(device).requires_grad_(True) for name, shape in shapes.items()}


def adamw(params, o):
    no_decay = [p for n, p in params.items() if "layernorm" in n]
    decay = [p for n, p in params.items() if "layernorm" not in n]
    groups = [{"params": decay, "weight_decay": o["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=o["lr"], betas=(o["adam_beta1"], o["adam_beta2"]), eps=o["adam_eps"])
    try:  # the fused CPU kernel (torch >= 2.4)
        return torch.optim.AdamW(groups, fused=True, **kwargs), "fused"
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kwargs), "foreach"


def main():
    spec = json.loads(pathlib.Path(sys.argv[1]).read_text())
    config, threads, mode = spec["config"], spec["threads"], spec["mode"]
    device = torch.device("cuda:0" if spec.get("device", "cpu").startswith("cuda") else "cpu")
    bf16 = spec.get("precision", "fp32") == "bf16"

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    m, o, t = config["model"], config["optimizer"], config["train"]
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    params = parameters(m, device)
    b, s, microbatches, v = t["micro_batch_size"], m["seq_length"], t["microbatches"], m["vocab_size"]
    fast = HAVE_SDPA
    cos, sin = rope_tables(s, m["hidden_size"] // m["num_attention_heads"], m["rotary_base"], device)

    def loss_of(tokens, targets):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if fast:
                return fast_forward(params, tokens, targets, m, cos, sin)
            return ref.forward(params, tokens, targets, m)

    if fast:  # the fast formulation computes the reference's model
        tokens = torch.randint(0, v, (b, s), device=device)
        targets = torch.randint(0, v, (b, s), device=device)
        with torch.no_grad():
            ours = fast_forward(params, tokens, targets, m, cos, sin).item()
            theirs = ref.forward(params, tokens, targets, m).item()
        if abs(ours - theirs) > 1e-5 * abs(theirs):
            sys.exit(f"torch_train_peer: the fast forward's loss {ours} differs from the reference's {theirs}")
    step_loss = torch.compile(loss_of) if mode == "compile" else loss_of
    opt, opt_kind = adamw(params, o)
    seconds = []
    for step in range(spec["warmup"] + spec["steps"]):
        tokens = torch.randint(0, v, (microbatches, b, s), device=device)
        targets = torch.randint(0, v, (microbatches, b, s), device=device)
        sync()
        begin = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for mb in range(microbatches):
            loss = step_loss(tokens[mb], targets[mb]) / microbatches
            loss.backward()
        if o["clip_grad"] > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), o["clip_grad"])
        opt.step()
        sync()
        if step >= spec["warmup"]:
            seconds.append(time.perf_counter() - begin)
        if not math.isfinite(loss.item()):
            sys.exit("torch_train_peer: non-finite loss")
    setup = (f"torch {torch.__version__} {mode}{' bf16 autocast' if bf16 else ''} on {device.type}, "
             f"{torch.get_num_threads()} threads, "
             f"{'sdpa causal + F.rms_norm' if fast else 'reference formulation (no sdpa in this torch)'}, "
             f"AdamW {opt_kind}")
    print(json.dumps({"seconds": seconds, "setup": setup, "torch": torch.__version__}))


if __name__ == "__main__":
    main()

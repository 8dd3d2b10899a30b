#!/usr/bin/env python3
"""One PyTorch peer of bench/mimo_vs_torch.py, in a process of its own: trains the MIMO model of a
resolved run config (configs/mimo_digits.json: a vision encoder whose outputs take the places of
the <image> tokens in a GPT's input) for warm-up + timed steps and prints the timed steps'
seconds as JSON.

The model, as plexus-train builds it (docs/mimo.md):
- the encoder: a patch embedding (a linear map of each patch, no bias, plus learned positions),
  transformer layers with LayerNorm and bidirectional attention (no positions beyond the
  embedding's), a final LayerNorm, and Megatron's MultimodalProjector "mlp" (linear with bias,
  GELU, linear with bias) to the language model's width;
- the language model: the GPT of bench/torch_train_peer.py (RMSNorm, rotary positions, causal
  attention, GELU MLP, tied output layer), whose embedding's rows at the special tokens are the
  encoder's outputs;
- one AdamW over both modules' parameters, clipped by one norm over all of them (Megatron's
  MimoOptimizer).
It is set up as bench/torch_train_peer.py sets up the GPT: one thread pool, subnormals flushed,
F.scaled_dot_product_attention and F.rms_norm where this torch has them, fused AdamW where the
CPU has it, and mode "compile" puts the loss function through torch.compile (inductor). The
special tokens sit at fixed places in every sample (the dataset's layout), so the splice is a
concatenation. Before timing, the peer's parameter count is checked against plexus model show's
for each module (SPEC's "parameters"), so it is fast at a model of the same size.

  python torch_mimo_peer.py SPEC.json   (SPEC: {"config": {...resolved...}, "threads": 2, "steps": 30,
                                          "warmup": 5, "mode": "eager"|"compile",
                                          "parameters": {"images": N, "language": M},
                                          "image_tokens": [first, end]})
"""
import json
import math
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import torch_train_peer as gpt  # noqa: E402

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def encoder_parameters(e, out_width):
    """The encoder's parameters by Megatron's names below modality_submodules.images."""
    c, f, patch = e["hidden_size"], e["ffn_hidden_size"], e["embedding"]["options"]
    patches = (patch["image_size"] // patch["patch_size"]) ** 2
    patch_dim = patch["patch_size"] ** 2 * patch.get("channels", 1)
    proj = e["head"]["options"]
    proj_f = proj.get("ffn_hidden_size", out_width)
    shapes = {"conv1.weight": (c, patch_dim), "position_embeddings.weight": (patches, c),
              "decoder.final_layernorm.weight": (c,), "decoder.final_layernorm.bias": (c,),
              "projection.linear_fc1.weight": (proj_f, c), "projection.linear_fc1.bias": (proj_f,),
              "projection.linear_fc2.weight": (proj["output_size"], proj_f),
              "projection.linear_fc2.bias": (proj["output_size"],)}
    for i in range(e["num_layers"]):
        p = f"decoder.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (c,), p + "input_layernorm.bias": (c,),
                       p + "pre_mlp_layernorm.weight": (c,), p + "pre_mlp_layernorm.bias": (c,),
                       p + "self_attention.linear_qkv.weight": (3 * c, c),
                       p + "self_attention.linear_proj.weight": (c, c),
                       p + "mlp.linear_fc1.weight": (f, c), p + "mlp.linear_fc2.weight": (c, f)})
    return {name: (torch.ones(shape) if "layernorm.weight" in name else torch.randn(shape) * 0.02)
            .requires_grad_(True) for name, shape in shapes.items()}, patches, patch_dim


def encoder_attention(x, p, pre, e):
    """Bidirectional multi-head attention of the encoder (no rotary positions)."""
    b, s, c = x.shape
    nh = e["num_attention_heads"]
    hd = c // nh
    u = F.layer_norm(x, (c,), p[pre + "input_layernorm.weight"], p[pre + "input_layernorm.bias"],
                     e["layernorm_epsilon"])
    qkv = F.linear(u, p[pre + "self_attention.linear_qkv.weight"]).view(b, s, nh, 3, hd)
    q, k, v = (qkv[:, :, :, i, :].transpose(1, 2) for i in range(3))
    if HAVE_SDPA:
        o = F.scaled_dot_product_attention(q, k, v)
    else:
        o = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1) @ v
    return F.linear(o.transpose(1, 2).reshape(b, s, c), p[pre + "self_attention.linear_proj.weight"])


def encoder_mlp(x, p, pre, e):
    c = x.shape[-1]
    u = F.layer_norm(x, (c,), p[pre + "pre_mlp_layernorm.weight"], p[pre + "pre_mlp_layernorm.bias"],
                     e["layernorm_epsilon"])
    return F.linear(F.gelu(F.linear(u, p[pre + "mlp.linear_fc1.weight"])), p[pre + "mlp.linear_fc2.weight"])


def encode(pixels, p, e):
    """[b, patches, patch_dim] pixels to [b, patches, the language model's width]."""
    x = F.linear(pixels, p["conv1.weight"]) + p["position_embeddings.weight"]
    for i in range(e["num_layers"]):
        pre = f"decoder.layers.{i}."
        x = x + encoder_attention(x, p, pre, e)
        x = x + encoder_mlp(x, p, pre, e)
    x = F.layer_norm(x, (x.shape[-1],), p["decoder.final_layernorm.weight"], p["decoder.final_layernorm.bias"],
                     e["layernorm_epsilon"])
    h = F.gelu(F.linear(x, p["projection.linear_fc1.weight"], p["projection.linear_fc1.bias"]))
    return F.linear(h, p["projection.linear_fc2.weight"], p["projection.linear_fc2.bias"])


def language_loss(p, tokens, targets, rows, first, end, m, cos, sin):
    """The GPT's loss with the embedding's rows [first, end) of every sample replaced by `rows`."""
    x = F.embedding(tokens, p["embedding.word_embeddings.weight"])
    x = torch.cat([x[:, :first], rows, x[:, end:]], dim=1)
    for i in range(m["num_layers"]):
        pre = f"decoder.layers.{i}."
        x = x + gpt.attention(x, p, pre, m, cos, sin)
        x = x + gpt.mlp(x, p, pre, m)
    y = gpt.norm(x, p, "decoder.final_layernorm.", m)
    logits = F.linear(y, p["embedding.word_embeddings.weight"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    spec = json.loads(pathlib.Path(sys.argv[1]).read_text())
    config, threads, mode = spec["config"], spec["threads"], spec["mode"]
    if not HAVE_SDPA:
        sys.exit("torch_mimo_peer: this torch has no F.scaled_dot_product_attention (torch >= 2 needed)")
    m, o, t = config["model"], config["optimizer"], config["train"]
    e = config["mimo"]["modules"][0]["model"]
    e["num_query_groups"] = e["num_query_groups"] or e["num_attention_heads"]
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    lm = gpt.parameters(m, torch.device("cpu"))
    enc, patches, patch_dim = encoder_parameters(e, m["hidden_size"])
    counts = {"images": sum(x.numel() for x in enc.values()), "language": sum(x.numel() for x in lm.values())}
    if counts != spec["parameters"]:
        sys.exit(f"torch_mimo_peer: parameters {counts}, but plexus model show counts {spec['parameters']}")
    first, end = spec["image_tokens"]
    if end - first != patches:
        sys.exit(f"torch_mimo_peer: {end - first} image tokens per sample, but the encoder makes {patches} rows")
    b, s, microbatches, v = t["micro_batch_size"], m["seq_length"], t["microbatches"], m["vocab_size"]
    cos, sin = gpt.rope_tables(s, m["hidden_size"] // m["num_attention_heads"], m["rotary_base"], torch.device("cpu"))

    def loss_of(pixels, tokens, targets):
        return language_loss(lm, tokens, targets, encode(pixels, enc, e), first, end, m, cos, sin)

    step_loss = torch.compile(loss_of) if mode == "compile" else loss_of
    every = {**{"images." + k: x for k, x in enc.items()}, **lm}
    opt, opt_kind = gpt.adamw(every, o)
    seconds, losses = [], []
    for step in range(spec["warmup"] + spec["steps"]):
        pixels = torch.rand(microbatches, b, patches, patch_dim)
        tokens = torch.randint(0, v, (microbatches, b, s))
        targets = torch.randint(0, v, (microbatches, b, s))
        begin = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for mb in range(microbatches):
            loss = step_loss(pixels[mb], tokens[mb], targets[mb]) / microbatches
            loss.backward()
        if o["clip_grad"] > 0:
            torch.nn.utils.clip_grad_norm_(list(every.values()), o["clip_grad"])
        opt.step()
        if step >= spec["warmup"]:
            seconds.append(time.perf_counter() - begin)
        losses.append(loss.item() * microbatches)
        if not math.isfinite(losses[-1]):
            sys.exit("torch_mimo_peer: non-finite loss")
    setup = (f"torch {torch.__version__} {mode} on cpu, {torch.get_num_threads()} threads, sdpa + F.rms_norm, "
             f"AdamW {opt_kind}")
    print(json.dumps({"seconds": seconds, "setup": setup, "torch": torch.__version__, "first_loss": losses[0]}))


if __name__ == "__main__":
    main()

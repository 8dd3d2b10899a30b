#!/usr/bin/env python3
"""PyTorch reference of the Plexus GPT (plugins/transformer), for whole-model parity tests.

Written from the layer contract in plugins/transformer/README.md, independently of the C++ code:
  embedding -> num_layers x (x + Attention(x), x + MLP(x)) -> final norm -> LM head + mean CE.
Weights are [out, in] (torch.nn.Linear); linear_qkv rows are grouped by query group
(Megatron's layout: per group, its query heads, then its key head, then its value head);
rotary embeddings are non-interleaved (rotate-half) over the whole head dim; a head that ties
its weight uses "embedding.word_embeddings.weight".

Usage (run with the system python, /usr/bin/python3, which sees Debian's python3-torch):
  gpt_reference.py --spec spec.json --weights init.safetensors --batch batch.safetensors \
                   --out result.safetensors
spec.json: {"model": {...the resolved model section...}, "no_decay": [names],
            "optimizer": {...}, "steps": N, "mhc": {...the mhc section...} (optional)}
"model" may hold "attn_mask_type", the attention's option (model.attention.options, Megatron's
AttnMaskType): "causal" (the default) or "no_mask", attention without the causal mask (every token
sees the whole sequence, as Megatron's CLIP ViT).
With "mhc" enabled, every sublayer is wrapped in mHC as docs/mhc.md describes, with the
primitives of tests/reference/mhc_reference.py (the reference of the "mhc" family).
With "mtp": {"depths": D, "scaling_factor": f} (D > 0), D multi-token-prediction depths follow
the main model as Megatron-LM's MultiTokenPredictionBlock computes them: depth k embeds the tokens
rolled k places left (vacated places: token 0, target ignored), joins enorm(that) and hnorm(the
hidden states of depth k-1 after their final norm; depth 0: the main model's) through eh_proj,
runs one transformer layer (mtp.layers.<k-1>.transformer_layer.), its final_layernorm and the
shared output layer against the targets rolled k places; the loss trained is the main loss plus
f / D times the depths' losses, the loss reported the main one.
result.safetensors: "loss" (float64 [1], the first step's loss), "grad/<name>" (the first
step's gradients, float32), "losses" (float64 [N], the loss of each of N AdamW steps).
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mhc_reference as mhc  # noqa: E402

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    """Reads a .safetensors file as the format's spec defines it (u64 LE header size, JSON
    header, then little-endian row-major data at data_offsets)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        data = bytearray(blob[base + begin:base + end])
        t = torch.frombuffer(data, dtype=dtype) if len(data) else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def norm(x, p, prefix, m):
    w = p[prefix + "weight"]
    if m["normalization"] == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m["layernorm_epsilon"]) * w
    return F.layer_norm(x, (x.shape[-1],), w, p[prefix + "bias"], m["layernorm_epsilon"])


def rope(x, base):
    """x: [B, S, H, hd]; rotate-half RoPE at positions 0..S-1."""
    s, hd = x.shape[1], x.shape[-1]
    inv = base ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2.0 / hd)
    angle = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
    cos = angle.cos().to(x.device, x.dtype)[None, :, None, :]
    sin = angle.sin().to(x.device, x.dtype)[None, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(x, p, pre, m):
    b, s, c = x.shape
    nh, ng = m["num_attention_heads"], m["num_query_groups"]
    hd, per = c // nh, nh // ng
    u = norm(x, p, pre + "input_layernorm.", m)
    qkv = (u @ p[pre + "self_attention.linear_qkv.weight"].T).view(b, s, ng, per + 2, hd)
    q = qkv[:, :, :, :per, :].reshape(b, s, nh, hd)
    k = qkv[:, :, :, per, :]
    v = qkv[:, :, :, per + 1, :]
    if m.get("position_embedding_type", "rope") == "rope":
        q, k = rope(q, m["rotary_base"]), rope(k, m["rotary_base"])
    k = k.repeat_interleave(per, dim=2)  # query head h reads group h // per
    v = v.repeat_interleave(per, dim=2)
    scores = torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(hd)
    if m.get("attn_mask_type", "causal") == "causal":
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    elif m["attn_mask_type"] != "no_mask":
        raise ValueError(f"attn_mask_type {m['attn_mask_type']!r}: expected 'causal' or 'no_mask'")
    probs = scores.softmax(-1)
    o = torch.einsum("bhst,bthd->bshd", probs, v).reshape(b, s, nh * hd)
    return o @ p[pre + "self_attention.linear_proj.weight"].T


def mlp(x, p, pre, m):
    u = norm(x, p, pre + "pre_mlp_layernorm.", m)
    a = u @ p[pre + "mlp.linear_fc1.weight"].T
    if m["activation"] == "swiglu":
        f = m["ffn_hidden_size"]
        act = F.silu(a[..., :f]) * a[..., f:]
    else:
        act = F.gelu(a)  # exact (erf) form
    return act @ p[pre + "mlp.linear_fc2.weight"].T


def hyper_connected(streams, p, pre, hc, sublayer):
    """One sublayer F under mHC: streams [B, S, n, C] -> [B, S, n, C]."""
    b, s, n, c = streams.shape
    x = streams.reshape(b * s, n, c)
    alpha = torch.cat([p[pre + "alpha_pre"], p[pre + "alpha_post"], p[pre + "alpha_res"]])
    proj, r = mhc.proj_rms(x, p[pre + "mapping_proj.weight"], hc["eps"])
    h_pre, h_post, h_res = mhc.mappings(proj, r, alpha, p[pre + "bias"], n, hc["sinkhorn_iterations"], hc["eps"])
    u = mhc.aggregate(x, h_pre)
    f = sublayer(u.reshape(b, s, c)).reshape(b * s, c)
    y = mhc.post_res(x, h_res, h_post, f, torch.zeros(c, dtype=f.dtype), hc["transposed_h_res"])
    return y.reshape(b, s, n, c)


def roll_left(t, k, fill):
    """t [B, S] moved k places left, the last k places `fill` (Megatron's roll_tensor with its mask)."""
    out = torch.full_like(t, fill)
    out[:, : t.shape[1] - k] = t[:, k:]
    return out


def mtp_losses(p, tokens, targets, y, m, depths):
    """The MTP depths' losses after the main model's final-norm output y."""
    h, losses = y, []
    for k in range(1, depths + 1):
        pre = f"mtp.layers.{k - 1}."
        rolled_tokens, rolled_targets = roll_left(tokens, k, 0), roll_left(targets, k, -1)
        e = p["embedding.word_embeddings.weight"][rolled_tokens.long()]
        joined = torch.cat([norm(e, p, pre + "enorm.", m), norm(h, p, pre + "hnorm.", m)], dim=-1)
        z = joined @ p[pre + "eh_proj.weight"].T
        layer = pre + "transformer_layer."
        z = z + attention(z, p, layer, m)
        z = z + mlp(z, p, layer, m)
        h = norm(z, p, pre + "final_layernorm.", m)
        losses.append(lm_loss(p, h, rolled_targets, m))
    return losses


def lm_loss(p, y, targets, m):
    head = "embedding.word_embeddings.weight" if not m["untie_embeddings_and_output_weights"] else "output_layer.weight"
    logits = y @ p[head].T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(), ignore_index=-1)


def forward(p, tokens, targets, m, hc=None):
    """The model's loss (the main model's, without any MTP depth)."""
    return forward_terms(p, tokens, targets, m, hc)[1]


def forward_terms(p, tokens, targets, m, hc=None, mtp=None):
    """The loss to train and the main model's loss (the same without MTP)."""
    x = p["embedding.word_embeddings.weight"][tokens.long()]
    if m.get("position_embedding_type", "rope") == "learned_absolute":
        x = x + p["embedding.position_embeddings.weight"][: tokens.shape[1]]
    if hc and hc.get("enabled"):
        n = hc["num_residual_streams"]
        streams = x[:, :, None, :].expand(-1, -1, n, -1)
        for i in range(m["num_layers"]):
            pre = f"decoder.layers.{i}."
            streams = hyper_connected(streams, p, pre + "self_attention_hyper_connection.", hc,
                                      lambda u: attention(u, p, pre, m))
            streams = hyper_connected(streams, p, pre + "mlp_hyper_connection.", hc, lambda u: mlp(u, p, pre, m))
        x = streams.mean(2)
    else:
        for i in range(m["num_layers"]):
            pre = f"decoder.layers.{i}."
            x = x + attention(x, p, pre, m)
            x = x + mlp(x, p, pre, m)
    y = norm(x, p, "decoder.final_layernorm.", m)
    loss = lm_loss(p, y, targets, m)
    if not mtp or mtp["depths"] == 0:
        return loss, loss
    extra = mtp_losses(p, tokens, targets, y, m, mtp["depths"])
    return loss + mtp["scaling_factor"] / mtp["depths"] * sum(extra), loss


def learning_rate(o, step, total):
    """The schedule of framework/src/engine/adamw.cpp: linear warmup, then cosine/linear decay."""
    if step < o["lr_warmup_steps"]:
        return o["lr"] * (step + 1) / o["lr_warmup_steps"]
    if o["lr_decay_style"] == "constant":
        return o["lr"]
    progress = min(1.0, (step - o["lr_warmup_steps"]) / max(1, total - o["lr_warmup_steps"]))
    factor = 1.0 - progress if o["lr_decay_style"] == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return o["min_lr"] + (o["lr"] - o["min_lr"]) * factor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    spec = json.load(open(args.spec))
    m, o, steps = spec["model"], spec["optimizer"], spec["steps"]
    torch.set_num_threads(1)
    params = {k: v.requires_grad_(True) for k, v in read_safetensors(args.weights).items()}
    batch = read_safetensors(args.batch)
    tokens, targets = batch["tokens"], batch["targets"]  # [microbatches, B, S]
    no_decay = set(spec["no_decay"])
    groups = [{"params": [t for n, t in params.items() if n not in no_decay], "weight_decay": o["weight_decay"]},
              {"params": [t for n, t in params.items() if n in no_decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=o["lr"], betas=(o["adam_beta1"], o["adam_beta2"]), eps=o["adam_eps"])
    out, losses = {}, []
    for step in range(max(1, steps)):
        opt.zero_grad()
        total = 0.0
        for mb in range(tokens.shape[0]):  # gradient accumulation, as the sequential scheduler
            trained, reported = forward_terms(params, tokens[mb], targets[mb], m, spec.get("mhc"), spec.get("mtp"))
            (trained / tokens.shape[0]).backward()
            total += reported.item() / tokens.shape[0]
        losses.append(total)
        if step == 0:
            out["loss"] = torch.tensor([total], dtype=torch.float64)
            for n, t in params.items():
                out["grad/" + n] = t.grad.detach().clone()
        if o["clip_grad"] > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), o["clip_grad"])
        for g in opt.param_groups:
            g["lr"] = learning_rate(o, step, steps)
        opt.step()
    out["losses"] = torch.tensor(losses, dtype=torch.float64)
    write_safetensors(args.out, out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch reference of a whole Plexus MIMO model (docs/mimo.md), for the parity test
tests/integration/test_mimo_parity.cpp: a vision encoder whose outputs replace the language
model's <image> embeddings, trained by the language model's loss.

Written from Megatron-LM's MIMO model and the layer contracts, independently of the C++ code,
in float64 with autograd:
  encoder   Megatron's CLIPViTModel without class token and ln_pre: torch.nn.Conv2d over the image
            (patches row by row) plus position_embeddings, the transformer layers of
            tests/reference/gpt_reference.py (LayerNorm, attention without the causal mask and
            without rotary positions), decoder.final_layernorm, then the MultimodalProjector "mlp"
            (Linear, exact GELU, Linear) to the language model's width;
  language  the GPT of tests/reference/gpt_reference.py, its embedding's rows at the special
            token replaced by the encoder's rows, in row-major (sample, position) order;
  loss      the mean cross-entropy over the targets that are not -1 (the places whose next token
            is the special token, as plexus-train's multimodal batches mark them).
It reads everything it needs from disk: the dataset (PREFIX.mimo.json, the images .npy and the
Megatron indexed token dataset), a checkpoint directory of plexus-train (model.safetensors with
Megatron's MIMO names, and state.json's resolved run config) and the sample numbers to run.

Usage (run with the system python, /usr/bin/python3, which sees Debian's python3-torch and numpy):
  mimo_reference.py --data PREFIX --checkpoint DIR --samples FIRST END --out result.safetensors
result.safetensors: "loss" (float64 [1]) and "grad/<name>" (float64) for every parameter of the
checkpoint, by its name there.
"""
import argparse
import json
import os
import struct
import sys

import numpy
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference as gpt  # noqa: E402
from mhc_reference import read_safetensors, write_safetensors  # noqa: E402

ENCODERS = "modality_submodules.{name}.encoders.{encoder}."
PROJECTION = "modality_submodules.{name}.input_projections.0.encoder."
LANGUAGE = "language_model."
INDEX_DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
                6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}


def read_tokens(prefix):
    """Every sequence of a Megatron indexed dataset (PREFIX.idx / PREFIX.bin), as int64 arrays."""
    with open(prefix + ".idx", "rb") as f:
        header = f.read(9)
        assert header == b"MMIDIDX\x00\x00", f"{prefix}.idx: not a Megatron index"
        assert struct.unpack("<Q", f.read(8))[0] == 1
        dtype = INDEX_DTYPES[struct.unpack("<B", f.read(1))[0]]
        count = struct.unpack("<Q", f.read(8))[0]
        struct.unpack("<Q", f.read(8))
        lengths = numpy.frombuffer(f.read(4 * count), dtype=numpy.int32)
        pointers = numpy.frombuffer(f.read(8 * count), dtype=numpy.int64)
    data = numpy.fromfile(prefix + ".bin", dtype=numpy.uint8)
    size = numpy.dtype(dtype).itemsize
    return [numpy.frombuffer(data[p:p + n * size].tobytes(), dtype=dtype).astype(numpy.int64)
            for n, p in zip(lengths, pointers)]


def resolved(model):
    """A model section with the engine's derived sizes filled in (0 means "derive")."""
    m = dict(model)
    m["num_query_groups"] = m.get("num_query_groups") or m["num_attention_heads"]
    m["attn_mask_type"] = m.get("attention", {}).get("options", {}).get("attn_mask_type", "causal")
    return m


def encode(p, prefix, projection, images, e):
    """[B, C, H, W] images to [B, patches, the language model's width]."""
    patch = e["embedding"]["options"]["patch_size"]
    x = F.conv2d(images, p[prefix + "conv1.weight"], stride=patch)  # [B, hidden, H/p, W/p]
    x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)     # patches row by row
    x = x + p[prefix + "position_embeddings.weight"]
    layers = {k[len(prefix):]: v for k, v in p.items() if k.startswith(prefix)}
    for i in range(e["num_layers"]):
        pre = f"decoder.layers.{i}."
        x = x + gpt.attention(x, layers, pre, e)
        x = x + gpt.mlp(x, layers, pre, e)
    x = gpt.norm(x, layers, "decoder.final_layernorm.", e)
    h = F.gelu(F.linear(x, p[projection + "linear_fc1.weight"], p[projection + "linear_fc1.bias"]))
    return F.linear(h, p[projection + "linear_fc2.weight"], p[projection + "linear_fc2.bias"])


def language_loss(p, tokens, targets, rows, special, m):
    lm = {k[len(LANGUAGE):]: v for k, v in p.items() if k.startswith(LANGUAGE)}
    x = lm["embedding.word_embeddings.weight"][tokens]
    at = tokens == special
    assert int(at.sum()) == rows.shape[0] * rows.shape[1], "the special tokens must be the encoder's rows"
    x = x.masked_scatter(at[..., None], rows.reshape(-1, rows.shape[-1]))  # row-major order
    for i in range(m["num_layers"]):
        pre = f"decoder.layers.{i}."
        x = x + gpt.attention(x, lm, pre, m)
        x = x + gpt.mlp(x, lm, pre, m)
    y = gpt.norm(x, lm, "decoder.final_layernorm.", m)
    return gpt.lm_loss(lm, y, targets, m)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--samples", type=int, nargs=2, required=True, metavar=("FIRST", "END"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    config = json.load(open(os.path.join(args.checkpoint, "state.json")))["config"]
    manifest = json.load(open(args.data + ".mimo.json"))
    module = config["mimo"]["modules"][0]
    modality = manifest["modalities"][module["name"]]
    e, m = resolved(module["model"]), resolved(config["model"])
    special = modality["special_token"]
    first, end = args.samples

    directory = os.path.dirname(args.data)
    images = numpy.load(os.path.join(directory, modality["file"]))[first:end]
    images = torch.from_numpy(numpy.ascontiguousarray(images)).double().reshape([end - first] + modality["shape"])
    sequences = read_tokens(args.data)[first:end]
    whole = torch.from_numpy(numpy.stack(sequences))
    tokens = whole[:, :-1]
    targets = whole[:, 1:].clone()
    targets[targets == special] = -1  # a place whose next token is the image's: no target

    p = {k: v.double().requires_grad_(True)
         for k, v in read_safetensors(os.path.join(args.checkpoint, "model.safetensors")).items()}
    prefix = ENCODERS.format(name=module["name"], encoder=module["encoder"])
    projection = PROJECTION.format(name=module["name"])
    rows = encode(p, prefix, projection, images, e)
    loss = language_loss(p, tokens, targets, rows, special, m)
    loss.backward()
    out = {"loss": loss.detach().reshape(1)}
    for name, value in p.items():
        out["grad/" + name] = value.grad if value.grad is not None else torch.zeros_like(value)
    write_safetensors(args.out, {k: v.detach().contiguous() for k, v in out.items()})


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch reference of the vision plugin's layers (plugins/vision), for the parity test
tests/integration/test_vision_parity.cpp.

Written with PyTorch's own modules, independently of the C++ code; autograd gives every gradient.
  vision.patch_embedding   Megatron-LM's CLIPViTModel without class token and ln_pre: the image
                           [B, C, H, W] through torch.nn.Conv2d(C, hidden, kernel_size=patch,
                           stride=patch, bias=False), its [B, hidden, H/p, W/p] output flattened to
                           [B, P, hidden] (patches row by row, as Megatron reshapes and permutes),
                           plus position_embeddings.weight [P, hidden]
  vision.projection        Megatron-LM's MultimodalProjector, projector_type "mlp":
                           torch.nn.Linear(d_in, ffn) -> torch.nn.GELU() (exact, erf) ->
                           torch.nn.Linear(ffn, output_size)
Each case runs twice: in float64 ("f64": the exact answer for the given, possibly float32, inputs)
and in float32 ("f32": what PyTorch's own float32 arithmetic gives), from the same inputs.

Usage (run with the system python, /usr/bin/python3, which sees Debian's python3-torch):
  vision_reference.py --spec spec.json --inputs inputs.safetensors --out result.safetensors
spec.json: {"cases": [{"name": str, "kind": "patch_embedding", "channels", "patch_size", "hidden"}
                      | {"name": str, "kind": "projection"}, ...]}
inputs (float32 or float64), per case "<name>/<tensor>":
  patch_embedding: image [B, C, H, W], grad_output [B, P, hidden] (the upstream gradient: the
                   gradient of sum(grad_output * out)), param/conv1.weight [hidden, C, p, p],
                   param/position_embeddings.weight [P, hidden]
  projection:      hidden [B, P, d_in], grad_output [B, P, output_size],
                   param/encoder.linear_fc1.weight [ffn, d_in], param/encoder.linear_fc1.bias [ffn],
                   param/encoder.linear_fc2.weight [output_size, ffn], param/encoder.linear_fc2.bias
result, per case and for precision in (f64, f32), in that precision: "<name>/<precision>/output",
  "<name>/<precision>/grad/image" (patch_embedding) or ".../grad/hidden" (projection), and
  "<name>/<precision>/grad/<parameter name>" for every parameter.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mhc_reference import read_safetensors, write_safetensors  # noqa: E402


def patch_embedding(case, t, dtype):
    image = t["image"].to(dtype).clone().requires_grad_(True)
    w = t["param/conv1.weight"]
    pos = t["param/position_embeddings.weight"].to(dtype).clone().requires_grad_(True)
    conv = torch.nn.Conv2d(case["channels"], case["hidden"], kernel_size=case["patch_size"],
                           stride=case["patch_size"], bias=False).to(dtype)
    assert tuple(conv.weight.shape) == tuple(w.shape), (conv.weight.shape, w.shape)
    with torch.no_grad():
        conv.weight.copy_(w.to(dtype))
    x = conv(image)                                   # [B, hidden, H/p, W/p]
    x = x.reshape(x.shape[0], x.shape[1], -1)         # Megatron's CLIPViTModel.forward
    x = x.permute(0, 2, 1)                            # [B, P, hidden]
    out = x + pos                                     # position_embeddings(arange(P))
    out.backward(t["grad_output"].to(dtype))
    return out, {"grad/image": image.grad, "grad/conv1.weight": conv.weight.grad,
                 "grad/position_embeddings.weight": pos.grad}


def projection(t, dtype):
    hidden = t["hidden"].to(dtype).clone().requires_grad_(True)
    w1, b1 = t["param/encoder.linear_fc1.weight"], t["param/encoder.linear_fc1.bias"]
    w2, b2 = t["param/encoder.linear_fc2.weight"], t["param/encoder.linear_fc2.bias"]
    fc1 = torch.nn.Linear(w1.shape[1], w1.shape[0]).to(dtype)
    fc2 = torch.nn.Linear(w2.shape[1], w2.shape[0]).to(dtype)
    with torch.no_grad():
        fc1.weight.copy_(w1.to(dtype))
        fc1.bias.copy_(b1.to(dtype))
        fc2.weight.copy_(w2.to(dtype))
        fc2.bias.copy_(b2.to(dtype))
    gelu = torch.nn.GELU()
    assert gelu.approximate == "none"
    out = fc2(gelu(fc1(hidden)))
    out.backward(t["grad_output"].to(dtype))
    return out, {"grad/hidden": hidden.grad,
                 "grad/encoder.linear_fc1.weight": fc1.weight.grad,
                 "grad/encoder.linear_fc1.bias": fc1.bias.grad,
                 "grad/encoder.linear_fc2.weight": fc2.weight.grad,
                 "grad/encoder.linear_fc2.bias": fc2.bias.grad}


def run_case(case, inputs):
    name = case["name"]
    prefix = name + "/"
    t = {k[len(prefix):]: v for k, v in inputs.items() if k.startswith(prefix)}
    result = {}
    for label, dtype in (("f64", torch.float64), ("f32", torch.float32)):
        if case["kind"] == "patch_embedding":
            out, grads = patch_embedding(case, t, dtype)
        elif case["kind"] == "projection":
            out, grads = projection(t, dtype)
        else:
            raise SystemExit(f"case {name}: unknown kind {case['kind']!r}")
        result[f"{name}/{label}/output"] = out.detach()
        for k, v in grads.items():
            result[f"{name}/{label}/{k}"] = v.detach()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", required=True)
    parser.add_argument("--inputs", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    torch.set_num_threads(1)  # deterministic float32 sums; the sizes are tiny
    inputs = read_safetensors(args.inputs)
    result = {}
    for case in spec["cases"]:
        result.update(run_case(case, inputs))
    write_safetensors(args.out, result)


if __name__ == "__main__":
    main()

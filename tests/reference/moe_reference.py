"""PyTorch reference of the MoE sublayer (plugins/moe, component moe.layer), for the parity test
tests/integration/test_moe_parity.cpp.

Written from the layer's contract (plugins/moe/README.md), independently of the C++ code, and in
a different form: no permutation; every expert runs on every token and a dense [T, E] combine
matrix (the probability where the expert was chosen, 0 elsewhere) weights their outputs.
Autograd gives every gradient. F(h), with h [b, l, C] flattened to T = b l tokens:
  u = PreNorm(h)                               RMSNorm, or LayerNorm (with a bias)
  z = u @ router^T                             [T, E]
  S = the k largest logits of each token; with groups (num_groups G, group_topk g): among the
      experts of the g groups whose k / g largest selection scores (the logits for softmax after
      the top-k, else the softmax or sigmoid scores) sum highest
  softmax:         p = softmax(z[S])           (pre_softmax: softmax(z)[S])
  sigmoid:         p = sigmoid(z)[S], / its sum + 1e-20 when k > 1
  capacity (optional): expert e keeps at most ceil(T k / E * factor) of its (token, choice) pairs,
    those of highest p (policy "probs", ties to the earlier token) or of the earliest tokens
    ("position"); a dropped pair's p counts as 0 (the rest are not renormalized)
  F = sum_{e} combine[:, e] * fc2_e(act(fc1_e(u)))       act: gelu (erf), or swiglu (silu(gate) * up)
    (+ shared(u), the shared experts' MLP, when there is one)
  aux = E coeff / (k T^2) sum_e (sum_t s_te) count_e,   s = softmax(z), or sigmoid(z) / (sum + 1e-20)
        (not normalized when k = 1); count_e from a plain top-k of s (no groups, no drops)
  zl  = coeff / T sum_t logsumexp(z_t)^2
The objective whose gradients are compared: sum(grad_output * F) + loss_scale (aux + zl).
Everything is float64.

Usage (run with the system python, /usr/bin/python3, which sees Debian's python3-torch):
  moe_reference.py --spec spec.json --inputs inputs.safetensors --out result.safetensors
spec.json: {"cases": [{"name", "experts", "topk", "normalization", "layernorm_epsilon",
             "activation": "gelu"|"swiglu", "score": "softmax"|"sigmoid", "pre_softmax": bool,
             "aux_loss_coeff", "z_loss_coeff", "loss_scale", "capacity_factor" (0: dropless),
             "drop_policy": "probs"|"position", "shared": bool, "num_groups", "group_topk" (0: off),
             "topk_scaling_factor" (probs multiplied by it; 1: none), "shared_gate": bool (the shared
             expert's output times sigmoid(u . mlp.shared_experts.gate_weight))},
             ...]}
inputs (float32 or float64), per case: "<name>/hidden" [b, l, C], "<name>/grad_output" [b, l, C]
  and "<name>/param/<parameter name>" for every parameter, named as the layer names them.
result, float64, per case: "<name>/output", "<name>/aux_loss" [1], "<name>/z_loss" [1],
  "<name>/grad/hidden" and "<name>/grad/<parameter name>".
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mhc_reference import read_safetensors, write_safetensors  # noqa: E402


def pre_norm(h, p, case):
    eps = case["layernorm_epsilon"]
    w = p["pre_mlp_layernorm.weight"]
    if case["normalization"] == "RMSNorm":
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w
    return F.layer_norm(h, h.shape[-1:], w, p["pre_mlp_layernorm.bias"], eps)


def mlp(u, fc1, fc2, case):
    a = u @ fc1.T
    if case["activation"] == "swiglu":
        gate, up = a.chunk(2, dim=-1)
        act = F.silu(gate) * up
    else:
        act = F.gelu(a)
    return act @ fc2.T


def expert(u, p, e, case):
    prefix = f"mlp.experts.local_experts.{e}."
    return mlp(u, p[prefix + "linear_fc1.weight"], p[prefix + "linear_fc2.weight"], case)


def capacity_mask(combine, chosen, case):
    """[T, E]: 1 where expert e keeps token t's pair."""
    tokens, experts = combine.shape
    k = case["topk"]
    capacity = math.ceil(tokens * k / experts * case["capacity_factor"])
    routed = torch.zeros(tokens, experts, dtype=torch.bool).scatter(1, chosen, True)
    mask = torch.zeros(tokens, experts, dtype=combine.dtype)
    for e in range(experts):
        rows = [t for t in range(tokens) if routed[t, e]]
        if case["drop_policy"] == "probs":
            rows = sorted(rows, key=lambda t: -float(combine[t, e]))  # stable: ties keep token order
        for t in rows[:capacity]:
            mask[t, e] = 1
    return mask


def group_limited_topk(selection, z, case):
    """[T, k] expert ids: the k largest logits among the experts of each token's best groups."""
    tokens, experts = z.shape
    groups, g, k = case["num_groups"], case["group_topk"], case["topk"]
    group_scores = selection.view(tokens, groups, -1).topk(k // g, dim=-1).values.sum(-1)
    best = torch.topk(group_scores, g, dim=-1).indices
    allowed = torch.zeros(tokens, groups, dtype=torch.bool).scatter(1, best, True)
    allowed = allowed.repeat_interleave(experts // groups, dim=1)
    return torch.topk(z.masked_fill(~allowed, float("-inf")), k, dim=-1).indices


def moe_layer(h, p, case):
    experts, k = case["experts"], case["topk"]
    b, l, c = h.shape
    u = pre_norm(h, p, case).reshape(b * l, c)
    tokens = u.shape[0]
    z = u @ p["mlp.router.weight"].T
    plain = torch.topk(z.detach(), k, dim=-1).indices
    chosen = plain
    if case["num_groups"] > 0:
        zd = z.detach()
        if case["score"] == "sigmoid":
            selection = torch.sigmoid(zd)
        elif case["pre_softmax"]:
            selection = torch.softmax(zd, dim=-1)
        else:
            selection = zd
        chosen = group_limited_topk(selection, zd, case)
    if case["score"] == "softmax":
        if case["pre_softmax"]:
            probs = torch.softmax(z, dim=-1).gather(1, chosen)
        else:
            probs = torch.softmax(z.gather(1, chosen), dim=-1)
        scores = torch.softmax(z, dim=-1)
    else:
        sig = torch.sigmoid(z)
        probs = sig.gather(1, chosen)
        if k > 1:
            probs = probs / (probs.sum(-1, keepdim=True) + 1e-20)
        scores = sig / (sig.sum(-1, keepdim=True) + 1e-20) if k > 1 else sig
    probs = probs * case.get("topk_scaling_factor", 1.0)
    combine = torch.zeros(tokens, experts, dtype=z.dtype).scatter(1, chosen, probs)
    if case["capacity_factor"] > 0:
        combine = combine * capacity_mask(combine.detach(), chosen, case)
    out = sum(combine[:, e:e + 1] * expert(u, p, e, case) for e in range(experts))
    if case["shared"]:
        shared = mlp(u, p["mlp.shared_experts.linear_fc1.weight"], p["mlp.shared_experts.linear_fc2.weight"], case)
        if case.get("shared_gate", False):
            shared = shared * torch.sigmoid(u @ p["mlp.shared_experts.gate_weight"].T)
        out = out + shared
    counts = torch.zeros(experts, dtype=z.dtype).scatter_add(0, plain.reshape(-1),
                                                             torch.ones(tokens * k, dtype=z.dtype))
    aux = experts * case["aux_loss_coeff"] / (k * tokens * tokens) * (scores.sum(0) * counts).sum()
    zl = case["z_loss_coeff"] * torch.logsumexp(z, dim=-1).pow(2).mean()
    return out.reshape(b, l, c), aux, zl


def run_case(case, inputs):
    name = case["name"]
    prefix = name + "/param/"
    params = {k[len(prefix):]: v.to(torch.float64) for k, v in inputs.items() if k.startswith(prefix)}
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    h = inputs[name + "/hidden"].to(torch.float64).clone().requires_grad_(True)
    grad_output = inputs[name + "/grad_output"].to(torch.float64)
    f, aux, zl = moe_layer(h, leaves, case)
    objective = (grad_output * f).sum() + case["loss_scale"] * (aux + zl)
    objective.backward()
    out = {f"{name}/output": f.detach(), f"{name}/aux_loss": aux.detach().reshape(1),
           f"{name}/z_loss": zl.detach().reshape(1), f"{name}/grad/hidden": h.grad}
    for k, v in leaves.items():
        out[f"{name}/grad/{k}"] = v.grad
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", required=True)
    parser.add_argument("--inputs", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    inputs = read_safetensors(args.inputs)
    result = {}
    for case in spec["cases"]:
        result.update(run_case(case, inputs))
    write_safetensors(args.out, result)


if __name__ == "__main__":
    main()

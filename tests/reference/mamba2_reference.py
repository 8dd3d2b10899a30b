#!/usr/bin/env python3
"""PyTorch reference of the Mamba-2 layer (plugins/mamba, component mamba.mixer), for parity tests
(tests/integration/test_mamba_parity.cpp) and the PyTorch side of bench/torch_mamba.py.

Written from the layer's contract (plugins/mamba/README.md), independently of the C++ code;
autograd gives every gradient. F(h), with h [b, l, d_model]:
  u = PreNorm(h)                                   RMSNorm, or LayerNorm (with a bias)
  z, xBC, dt_raw = split(u @ in_proj^T, [d_inner, d_inner + 2 G N, H])
  xBC = silu(causal depthwise conv1d(xBC) + conv bias)    kernel W, zero left padding
  x, B, C = split(xBC, [d_inner, G N, G N]); head h uses group h // (H / G)
  dt = softplus(dt_raw + dt_bias)                  linear above 20 (torch's threshold)
  A = -exp(A_log)
  y = SSD(x, dt, A, B, C) + D x                    per head: S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T,
                                                   y_t = S_t C_t, S_0 = 0
  g = y * silu(z); o = g / sqrt(mean over each group of d_inner / G values of g^2 + eps) * w
  F = o @ out_proj^T
The SSD runs two ways: "chunked", the minimal chunked algorithm of the Mamba-2 paper (stable
segment sums; B and C expanded to heads explicitly; the tail padded with dt = 0 up to a whole
chunk), and "recurrent", the plain recurrence token by token. Everything is float64.

Usage (run with the system python, /usr/bin/python3, which sees Debian's python3-torch):
  mamba2_reference.py --spec spec.json --inputs inputs.safetensors --out result.safetensors
spec.json: {"cases": [{"name": str, "d_model", "d_inner", "nheads", "headdim", "ngroups",
             "d_state", "d_conv", "chunk_size": int, "normalization": "RMSNorm"|"LayerNorm",
             "layernorm_epsilon", "norm_epsilon": float}, ...]}
inputs (float32 or float64), per case: "<name>/hidden" [b, l, d_model], "<name>/grad_output"
  [b, l, d_model] (the upstream gradient: the gradient of sum(grad_output * F)) and
  "<name>/param/<parameter name>" for every parameter of the layer, named as the layer names them
  (norm.weight, norm.bias, mixer.in_proj.weight, mixer.conv1d.weight, ...).
result, float64, per case and for ssd in (chunked, recurrent): "<name>/<ssd>/output",
  "<name>/<ssd>/grad/hidden" and "<name>/<ssd>/grad/<parameter name>".
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mhc_reference import read_safetensors, write_safetensors  # noqa: E402


def segsum(a):
    """[..., T] -> [..., T, T]: out[i, j] = a[j+1] + ... + a[i] for i >= j, -inf above the diagonal.
    Summed directly (a masked cumulative sum), not as a difference of two cumulative sums, so
    nothing cancels."""
    t = a.size(-1)
    terms = a[..., :, None].expand(*a.shape, t)  # terms[..., k, j] = a[k]
    terms = terms.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(-1), 0.0)  # kept where k > j
    sums = terms.cumsum(dim=-2)  # sums[..., i, j] = a[j+1] + ... + a[i]
    return sums.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(0), float("-inf"))


def ssd_chunked(x, a, B, C, chunk):
    """The minimal chunked SSD. x [b, l, h, p] (already scaled by dt), a [b, l, h] (= dt A),
    B and C [b, l, h, n] (already expanded to heads); l a multiple of chunk. Returns y [b, l, h, p]."""
    b, l, h, p = x.shape
    c = l // chunk
    x = x.reshape(b, c, chunk, h, p)
    B = B.reshape(b, c, chunk, h, -1)
    C = C.reshape(b, c, chunk, h, -1)
    a = a.reshape(b, c, chunk, h).permute(0, 3, 1, 2)  # [b, h, c, q]
    a_cumsum = a.cumsum(dim=-1)

    # 1. Within each chunk: y_l = sum over s <= l of (C_l . B_s) exp(a_{s+1} + ... + a_l) x_s.
    decay = torch.exp(segsum(a))  # [b, h, c, l, s]
    y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, decay, x)

    # 2. Each chunk's own final state, from zero: sum over s of exp(a_{s+1} + ... + a_last) x_s B_s^T.
    to_end = torch.exp(a_cumsum[..., -1:] - a_cumsum)  # [b, h, c, q]
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, to_end, x)

    # 3. The states entering each chunk, passed from chunk to chunk (the first one is zero).
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    chunk_decay = torch.exp(segsum(F.pad(a_cumsum[..., -1], (1, 0))))  # [b, h, c + 1, c + 1]
    states = torch.einsum("bhzc,bchpn->bzhpn", chunk_decay, states)[:, :-1]

    # 4. What the entering state contributes: exp(a_1 + ... + a_l) C_l . S.
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, torch.exp(a_cumsum))
    return (y_diag + y_off).reshape(b, l, h, p)


def ssd_recurrent(x, a, B, C):
    """The plain recurrence, token by token: S_t = exp(a_t) S_{t-1} + x_t B_t^T, y_t = S_t C_t."""
    b, l, h, p = x.shape
    state = torch.zeros(b, h, p, B.shape[-1], dtype=x.dtype)
    ys = []
    for t in range(l):
        state = torch.exp(a[:, t])[..., None, None] * state + x[:, t, :, :, None] * B[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[:, t]))
    return torch.stack(ys, dim=1)


def ssd(kind, x, dt, A, B, C, chunk):
    """y = SSD(x, dt, A, B, C) in the form `kind`; x [b, l, h, p], dt [b, l, h], B and C [b, l, h, n]."""
    xs, a = x * dt[..., None], dt * A
    if kind == "recurrent":
        return ssd_recurrent(xs, a, B, C)
    l = x.shape[1]
    pad = -l % chunk  # dt = 0 past the end: the state passes through unchanged, outputs dropped
    if pad:
        xs, a, B, C = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (xs, a, B, C))
    return ssd_chunked(xs, a, B, C, chunk)[:, :l]


def pre_norm(h, p, case):
    eps = case["layernorm_epsilon"]
    if case["normalization"] == "RMSNorm":
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * p["norm.weight"]
    return F.layer_norm(h, h.shape[-1:], p["norm.weight"], p["norm.bias"], eps)


def mamba_layer(h, p, case, kind):
    d_inner, heads, headdim = case["d_inner"], case["nheads"], case["headdim"]
    groups, state, width = case["ngroups"], case["d_state"], case["d_conv"]
    b, l, _ = h.shape
    zxbcdt = pre_norm(h, p, case) @ p["mixer.in_proj.weight"].T
    z, xbc, dt_raw = torch.split(zxbcdt, [d_inner, d_inner + 2 * groups * state, heads], dim=-1)
    conv = F.conv1d(xbc.transpose(1, 2), p["mixer.conv1d.weight"], p["mixer.conv1d.bias"],
                    padding=width - 1, groups=xbc.shape[-1])[..., :l]
    xbc = F.silu(conv).transpose(1, 2)
    x, B, C = torch.split(xbc, [d_inner, groups * state, groups * state], dim=-1)
    per_group = heads // groups
    B = B.reshape(b, l, groups, state).repeat_interleave(per_group, dim=2)
    C = C.reshape(b, l, groups, state).repeat_interleave(per_group, dim=2)
    dt = F.softplus(dt_raw + p["mixer.dt_bias"], beta=1.0, threshold=20.0)
    A = -torch.exp(p["mixer.A_log"])
    x = x.reshape(b, l, heads, headdim)
    y = ssd(kind, x, dt, A, B, C, case["chunk_size"]) + p["mixer.D"][:, None] * x
    g = y.reshape(b, l, d_inner) * F.silu(z)
    g = g.reshape(b, l, groups, d_inner // groups)
    o = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + case["norm_epsilon"])).reshape(b, l, d_inner)
    return (o * p["mixer.norm.weight"]) @ p["mixer.out_proj.weight"].T


def run_case(case, inputs):
    name = case["name"]
    prefix = name + "/param/"
    params = {k[len(prefix):]: v.to(torch.float64) for k, v in inputs.items() if k.startswith(prefix)}
    hidden = inputs[name + "/hidden"].to(torch.float64)
    grad_output = inputs[name + "/grad_output"].to(torch.float64)
    out = {}
    for kind in ("chunked", "recurrent"):
        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        h = hidden.clone().requires_grad_(True)
        f = mamba_layer(h, leaves, case, kind)
        f.backward(grad_output)
        out[f"{name}/{kind}/output"] = f.detach()
        out[f"{name}/{kind}/grad/hidden"] = h.grad
        for k, v in leaves.items():
            out[f"{name}/{kind}/grad/{k}"] = v.grad
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

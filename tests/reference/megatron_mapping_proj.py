#!/usr/bin/env python3
"""Megatron-LM's mHC projection as Megatron builds it: torch.nn.Linear(n*C, n*n + 2n, bias=False)
(the mapping_proj of megatron/core/transformer/hyper_connection.py), its weight loaded from a
Plexus checkpoint with load_state_dict, which refuses a tensor of another shape, and applied in
float64 to the flattened streams x [T, n*C]: proj = mapping_proj(x) [T, n*n + 2n].

Usage (the system python, /usr/bin/python3, which sees Debian's python3-torch):
  megatron_mapping_proj.py --checkpoint model.safetensors --name TENSOR --streams n --hidden C
                           --inputs x.safetensors --out proj.safetensors
inputs: "x" [T, n*C] float64; out: "proj" [T, n*n + 2n] float64.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mhc_reference import read_safetensors, write_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--checkpoint", "--name", "--inputs", "--out"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    a = ap.parse_args()
    n, c = a.streams, a.hidden
    mapping_proj = torch.nn.Linear(n * c, n * n + 2 * n, bias=False)
    mapping_proj.load_state_dict({"weight": read_safetensors(a.checkpoint)[a.name]})
    x = read_safetensors(a.inputs)["x"]
    with torch.no_grad():
        proj = mapping_proj.double()(x)
    write_safetensors(a.out, {"proj": proj})


if __name__ == "__main__":
    main()

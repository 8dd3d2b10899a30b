#!/usr/bin/env python3
"""Loads a Hugging Face model directory with transformers (AutoModelForCausalLM, float32) and writes
its logits for the token ids of a safetensors file, for tests/integration/test_hf_export.cpp.

Usage (the venv <repo>/.venv-hf of scripts/python-env.sh):
  hf_logits.py MODEL_DIR TOKENS.safetensors OUT.safetensors
TOKENS.safetensors: "tokens" int32 [1, S]. OUT: "logits" float32 [S, V], "architecture" as metadata.
"""
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def main():
    model_dir, tokens_file, out_file = sys.argv[1:4]
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    tokens = load_file(tokens_file)["tokens"].long()
    with torch.no_grad():
        logits = model(tokens).logits[0].float().contiguous()
    save_file({"logits": logits}, out_file, metadata={"architecture": type(model).__name__})


if __name__ == "__main__":
    main()

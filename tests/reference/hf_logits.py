#!/usr/bin/env python3
"""Hugging Face transformers' side of tests/integration/test_hf_export.cpp.

Usage (the venv <repo>/.venv-hf of scripts/python-env.sh):
  hf_logits.py logits MODEL_DIR TOKENS.safetensors OUT.safetensors
      loads MODEL_DIR with AutoModelForCausalLM (float32) and writes its logits for "tokens" (int32
      [1, S]) as "logits" float32 [S, V], and its loss of predicting each next token ("loss" [1]),
      with the model's class name as metadata "architecture"
  hf_logits.py make MODEL_DIR [llama|mixtral]
      saves a random LlamaForCausalLM (bfloat16 weights, GQA, untied, vocabulary 256) as a model
      trained elsewhere would come, or a MixtralForCausalLM of 4 experts, 2 per token
"""
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM


def logits(model_dir, tokens_file, out_file):
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    tokens = load_file(tokens_file)["tokens"].long()
    with torch.no_grad():
        out = model(tokens, labels=tokens)
    save_file({"logits": out.logits[0].float().contiguous(), "loss": out.loss.double().reshape(1)}, out_file,
              metadata={"architecture": type(model).__name__})


def make(model_dir, kind):
    torch.manual_seed(3)
    sizes = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                 rms_norm_eps=1e-5, rope_theta=5000.0, tie_word_embeddings=False, initializer_range=0.1)
    if kind == "mixtral":
        model = MixtralForCausalLM(MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **sizes))
    else:
        model = LlamaForCausalLM(LlamaConfig(**sizes))
    model = model.to(torch.bfloat16)
    model.save_pretrained(model_dir, safe_serialization=True)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "llama")
    else:
        logits(*sys.argv[2:5])

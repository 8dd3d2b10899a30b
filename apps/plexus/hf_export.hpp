// plexus checkpoint export --format hf: a Plexus checkpoint as a Hugging Face transformers model
// directory (config.json, model.safetensors, and the dataset's tokenizer.json when the run had
// one). The GPT with RMSNorm, SwiGLU, rotary embeddings and grouped query attention is
// transformers' LlamaForCausalLM, tensor for tensor as hf_names.hpp lists them: Megatron's fused
// qkv rows (query group by query group) regrouped into q, k and v, linear_fc1's [gate; up] split,
// the vocabulary's padded rows left out, a tied output layer written as tie_word_embeddings.
//
// A GPT whose every MLP is an MoE layer routed as Mixtral routes (softmax, the top k renormalized,
// dropless, no shared expert) is transformers' MixtralForCausalLM: the router is
// block_sparse_moe.gate, expert e's [gate; up] and down are its w1, w3 and w2.
//
// Both of Megatron's spellings of the pre-norms (and of TEGroupedMLP's experts) are read. Anything
// transformers cannot hold is refused naming it (LayerNorm, GeLU, other position embeddings, mHC,
// dense and MoE layers mixed, other routing, Mamba or any other tensor); multi-token-prediction
// depths are left out, saying so.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace plexus::cli {

struct HfExportResult {
  std::string architecture;  // LlamaForCausalLM or MixtralForCausalLM
  std::int64_t step = 0;
  std::int64_t tensors = 0;
  bool tokenizer = false;            // tokenizer.json copied from the run's data.tokenizer
  std::vector<std::string> dropped;  // what was left out (MTP depths), for the message
};

// Throws std::runtime_error (CheckpointError for a bad checkpoint) naming what is wrong; writes
// nothing into `out` unless the whole export is possible, and refuses an `out` that exists.
HfExportResult export_hf(const std::filesystem::path& checkpoint, const std::filesystem::path& out);

}  // namespace plexus::cli

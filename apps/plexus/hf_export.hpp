// plexus checkpoint export --format hf: a Plexus checkpoint as a Hugging Face transformers model
// directory (config.json, model.safetensors, and the dataset's tokenizer.json when the run had
// one). The GPT with RMSNorm, SwiGLU, rotary embeddings and grouped query attention is
// transformers' LlamaForCausalLM, tensor for tensor:
//
//   embedding.word_embeddings.weight             model.embed_tokens.weight (the vocabulary's rows,
//                                                without Megatron's padding)
//   decoder.layers.i.input_layernorm.weight      model.layers.i.input_layernorm.weight
//   ...self_attention.linear_qkv.weight          q_proj, k_proj, v_proj: Megatron's rows, query
//                                                group by group ([q heads of g; k_g; v_g]), regrouped
//   ...self_attention.linear_proj.weight         model.layers.i.self_attn.o_proj.weight
//   decoder.layers.i.pre_mlp_layernorm.weight    model.layers.i.post_attention_layernorm.weight
//   ...mlp.linear_fc1.weight [gate; up]          mlp.gate_proj.weight, mlp.up_proj.weight
//   ...mlp.linear_fc2.weight                     mlp.down_proj.weight
//   decoder.final_layernorm.weight               model.norm.weight
//   output_layer.weight (untied)                 lm_head.weight (tied: tie_word_embeddings)
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

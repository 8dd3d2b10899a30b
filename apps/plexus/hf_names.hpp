// Where each tensor of Plexus's GPT (Megatron's names) lives in transformers' LlamaForCausalLM and
// MixtralForCausalLM: the one table `plexus checkpoint export` and `import` both read.
//
//   Plexus (Megatron)                              transformers
//   embedding.word_embeddings.weight               model.embed_tokens.weight
//   decoder.layers.i.input_layernorm.weight        model.layers.i.input_layernorm.weight
//   ...self_attention.linear_qkv.weight            ...self_attn.{q,k,v}_proj.weight (regrouped)
//   ...self_attention.linear_proj.weight           ...self_attn.o_proj.weight
//   ...pre_mlp_layernorm.weight                    ...post_attention_layernorm.weight
//   ...mlp.linear_fc1.weight = [gate; up]          ...mlp.{gate,up}_proj.weight
//   ...mlp.linear_fc2.weight                       ...mlp.down_proj.weight
//   ...mlp.router.weight                           ...block_sparse_moe.gate.weight
//   ...mlp.experts.local_experts.e.linear_fc1      ...block_sparse_moe.experts.e.{w1,w3}.weight
//   ...mlp.experts.local_experts.e.linear_fc2      ...block_sparse_moe.experts.e.w2.weight
//   decoder.final_layernorm.weight                 model.norm.weight
//   output_layer.weight                            lm_head.weight
#pragma once

#include <cstdint>
#include <string>

namespace plexus::cli::hf_names {

struct Pair {
  std::string plexus, hf;
};

inline const Pair kEmbedding{"embedding.word_embeddings.weight", "model.embed_tokens.weight"};
inline const Pair kFinalNorm{"decoder.final_layernorm.weight", "model.norm.weight"};
inline const Pair kOutput{"output_layer.weight", "lm_head.weight"};

// Decoder layer i's names. The Transformer Engine spellings (te_*) are the other names Plexus's
// checkpoints may hold.
struct Layer {
  std::string plexus, hf;  // the prefixes
  explicit Layer(int64_t i)
      : plexus("decoder.layers." + std::to_string(i) + "."), hf("model.layers." + std::to_string(i) + ".") {}

  Pair input_norm() const { return {plexus + "input_layernorm.weight", hf + "input_layernorm.weight"}; }
  std::string te_input_norm() const { return plexus + "self_attention.linear_qkv.layer_norm_weight"; }
  std::string qkv() const { return plexus + "self_attention.linear_qkv.weight"; }
  std::string q() const { return hf + "self_attn.q_proj.weight"; }
  std::string k() const { return hf + "self_attn.k_proj.weight"; }
  std::string v() const { return hf + "self_attn.v_proj.weight"; }
  Pair attention_out() const {
    return {plexus + "self_attention.linear_proj.weight", hf + "self_attn.o_proj.weight"};
  }
  Pair mlp_norm() const {
    return {plexus + "pre_mlp_layernorm.weight", hf + "post_attention_layernorm.weight"};
  }
  std::string te_mlp_norm() const { return plexus + "mlp.linear_fc1.layer_norm_weight"; }
  Pair router() const { return {plexus + "mlp.router.weight", hf + "block_sparse_moe.gate.weight"}; }

  // An MLP's two projections in Plexus (fc1 = [gate; up], fc2) and its three in transformers.
  struct Mlp {
    std::string fc1, fc2, te_fc1, te_fc2;  // te_*: TEGroupedMLP's expert names ("" for a dense MLP)
    std::string gate, up, down;
  };
  Mlp dense() const {
    return {plexus + "mlp.linear_fc1.weight",
            plexus + "mlp.linear_fc2.weight",
            "",
            "",
            hf + "mlp.gate_proj.weight",
            hf + "mlp.up_proj.weight",
            hf + "mlp.down_proj.weight"};
  }
  Mlp expert(int64_t e) const {
    const std::string local = plexus + "mlp.experts.local_experts." + std::to_string(e) + ".";
    const std::string mixtral = hf + "block_sparse_moe.experts." + std::to_string(e) + ".";
    return {local + "linear_fc1.weight",
            local + "linear_fc2.weight",
            plexus + "mlp.experts.linear_fc1.weight" + std::to_string(e),
            plexus + "mlp.experts.linear_fc2.weight" + std::to_string(e),
            mixtral + "w1.weight",
            mixtral + "w3.weight",
            mixtral + "w2.weight"};
  }
};

}  // namespace plexus::cli::hf_names

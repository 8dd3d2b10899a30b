// What moe.layer reads and checks when it is created: its own options (Megatron-LM's names and
// defaults) and the model section's keys it shares with the dense MLP (the expert-parallel group
// is found in expert_exchange.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "plexus/cpp/host.hpp"

namespace plexus::moe {

// The component's name, used in every message.
inline constexpr const char* kComponent = "moe.layer";

enum class ScoreFunction { softmax, sigmoid };

struct MoeConfig {
  // From the model section.
  int64_t hidden = 0;           // hidden_size
  bool rms_prenorm = true;      // normalization: "RMSNorm", else "LayerNorm" (with a bias)
  double prenorm_eps = 1e-5;    // layernorm_epsilon
  double init_std = 0.02;       // init_method_std
  double output_init_std = 0;   // linear_fc2's std (depth-scaled like the dense MLP's)
  bool swiglu = false;          // activation

  // From the options.
  int64_t experts = 8;      // E, num_moe_experts
  int64_t topk = 2;         // k, moe_router_topk
  int64_t ffn = 0;          // F, moe_ffn_hidden_size (0: the model's ffn_hidden_size)
  bool pre_softmax = false;  // moe_router_pre_softmax
  ScoreFunction score = ScoreFunction::softmax;  // moe_router_score_function
  double aux_loss_coeff = 0;  // moe_aux_loss_coeff
  double z_loss_coeff = 0;    // moe_z_loss_coeff
  // moe_expert_capacity_factor: each expert takes at most ceil(T k / E * factor) of a
  // microbatch's T tokens; 0 (the option absent): dropless.
  double capacity_factor = 0;
  bool drop_by_position = false;  // moe_token_drop_policy "position", else "probs"
  int64_t shared_ffn = 0;         // moe_shared_expert_intermediate_size; 0: no shared experts
  // Group-limited routing: the experts in moe_router_num_groups equal groups; a token chooses
  // only among the moe_router_group_topk groups of highest score. 0: off.
  int64_t groups = 0, group_topk = 0;
  // The aux-loss-free expert bias (moe_router_enable_expert_bias): b [E] added to the selection
  // scores, after each step b_i += rate sign(mean_j count_j - count_i) over the step's tokens of
  // every data-parallel rank (moe_router_bias_update_rate).
  bool expert_bias = false;
  double bias_update_rate = 1e-3;
  // moe_router_topk_scaling_factor: the probabilities that weight the chosen experts' outputs
  // are multiplied by it after the score function (Megatron applies it for every score
  // function); 1 (the option absent): none.
  double topk_scaling_factor = 1;
  // moe_shared_expert_gate: the shared expert's output multiplied per token by sigmoid(u . g), g
  // the parameter mlp.shared_experts.gate_weight [1, C] (Megatron's SharedExpertMLP gate).
  bool shared_expert_gate = false;
  // moe_grouped_gemm: under checkpoint.names "te" the experts are spelled as Megatron's
  // TEGroupedMLP spells them (mlp.experts.linear_fc1.weight<i>); the computation is the same.
  bool grouped_gemm = false;

  int64_t fc1_rows() const { return swiglu ? 2 * ffn : ffn; }
  // The most (token, choice) pairs one expert takes from T tokens; T k (all) when dropless.
  int64_t capacity(int64_t tokens) const;

  // Reads and checks everything; throws plexus::sdk::Error naming the option or model key and
  // what was expected. Absent options take their defaults (the engine fills them from the
  // schema; a host that does not validate gets the same values). `residual_layers`: the create
  // args' plx_layer_residual_layers, which scales linear_fc2's initialization.
  static MoeConfig read(const plexus::sdk::Host& host, plx_config options, plx_config model,
                        uint32_t residual_layers);
};

// The options' schema (JSON text, the subset docs/config.md describes).
const char* options_schema();

}  // namespace plexus::moe

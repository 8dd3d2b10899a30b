#include "config.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "plexus/cpp/error.hpp"

namespace plexus::moe {
namespace {

using plexus::sdk::Error;

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

[[noreturn]] void bad_option(const std::string& key, const std::string& problem) {
  throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) + " option " + key + " " + problem);
}

// A number option, or nullopt when absent (the host's number getter reports an absent key as
// PLX_ERR_NOT_FOUND).
std::optional<double> number_if(const plexus::sdk::Host& host, plx_config node, const char* key) {
  const plx_host_api* api = host.api();
  double v = 0;
  const plx_status s = api->config_get_number(api->ctx, node, key, &v);
  if (s == PLX_ERR_NOT_FOUND) return std::nullopt;
  if (s != PLX_OK) throw Error::from_host(s);
  return v;
}

std::optional<std::string> string_if(const plexus::sdk::Host& host, plx_config node, const char* key) {
  const plx_host_api* api = host.api();
  const char* v = nullptr;
  const plx_status s = api->config_get_string(api->ctx, node, key, &v);
  if (s == PLX_ERR_NOT_FOUND) return std::nullopt;
  if (s != PLX_OK) throw Error::from_host(s);
  return std::string(v);
}

double coefficient(const plexus::sdk::Host& host, plx_config options, const char* key) {
  const double v = number_if(host, options, key).value_or(0.0);
  if (!std::isfinite(v) || v < 0) bad_option(key, "must be a finite number >= 0, got " + number_text(v));
  return v;
}

}  // namespace

MoeConfig MoeConfig::read(const plexus::sdk::Host& host, plx_config options, plx_config model,
                          uint32_t residual_layers) {
  MoeConfig c;
  // The model section (the engine validated it; a direct caller may not have).
  c.hidden = host.config_int(model, "hidden_size");
  if (c.hidden < 1)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "model hidden_size must be at least 1, got " + std::to_string(c.hidden));
  const std::string norm = host.config_string(model, "normalization");
  if (norm != "RMSNorm" && norm != "LayerNorm")
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "model normalization must be \"RMSNorm\" or \"LayerNorm\", got \"" + norm + "\"");
  c.rms_prenorm = norm == "RMSNorm";
  c.prenorm_eps = host.config_number(model, "layernorm_epsilon");
  if (!(c.prenorm_eps >= 0) || !std::isfinite(c.prenorm_eps))
    throw Error(PLX_ERR_INVALID_ARGUMENT, "model layernorm_epsilon must be >= 0, got " + number_text(c.prenorm_eps));
  c.init_std = host.config_number(model, "init_method_std");
  if (!(c.init_std > 0) || !std::isfinite(c.init_std))
    throw Error(PLX_ERR_INVALID_ARGUMENT, "model init_method_std must be a positive number, got " +
                                              number_text(c.init_std));
  const std::string activation = host.config_string(model, "activation");
  if (activation != "gelu" && activation != "swiglu")
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                "model activation must be \"gelu\" or \"swiglu\", got \"" + activation + "\"");
  c.swiglu = activation == "swiglu";
  if (residual_layers < 1)
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) +
                                              ": num_layers in the create args must be at least 1 (it scales "
                                              "linear_fc2's initialization), got 0");
  // Megatron's output_layer_init_method, as the dense MLP: std / sqrt(2 L) for a GPT and
  // std / sqrt(L) for a hybrid model, whose L counts every physical layer; both are over the
  // square root of the layers that add to the residual stream (plx_layer_residual_layers).
  c.output_init_std = c.init_std / std::sqrt(static_cast<double>(residual_layers));

  c.experts = host.config_int_if(options, "num_moe_experts").value_or(8);
  if (c.experts < 1) bad_option("num_moe_experts", "must be at least 1, got " + std::to_string(c.experts));
  c.topk = host.config_int_if(options, "moe_router_topk").value_or(2);
  if (c.topk < 1) bad_option("moe_router_topk", "must be at least 1, got " + std::to_string(c.topk));
  if (c.topk > c.experts)
    // The one-character literal as a char: g++ 12 -O3 warns falsely (-Wrestrict) when a literal
    // is prepended to a temporary string.
    bad_option("moe_router_topk", '(' + std::to_string(c.topk) + ") must not exceed num_moe_experts (" +
                                      std::to_string(c.experts) + "): each token picks k different experts");
  c.ffn = host.config_int_if(options, "moe_ffn_hidden_size").value_or(0);
  if (c.ffn < 0) bad_option("moe_ffn_hidden_size", "must be >= 0 (0: model ffn_hidden_size), got " + std::to_string(c.ffn));
  if (c.ffn == 0) {
    c.ffn = host.config_int(model, "ffn_hidden_size");
    if (c.ffn < 1)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(kComponent) +
                                                ": moe_ffn_hidden_size is 0, so the model's ffn_hidden_size is "
                                                "used, but it is " + std::to_string(c.ffn) + " (expected >= 1)");
  }
  c.pre_softmax = host.config_bool_if(options, "moe_router_pre_softmax").value_or(false);
  const std::string score = string_if(host, options, "moe_router_score_function").value_or("softmax");
  if (score == "softmax")
    c.score = ScoreFunction::softmax;
  else if (score == "sigmoid")
    c.score = ScoreFunction::sigmoid;
  else
    bad_option("moe_router_score_function", "must be \"softmax\" or \"sigmoid\", got \"" + score + "\"");
  if (c.pre_softmax && c.score != ScoreFunction::softmax)
    bad_option("moe_router_pre_softmax", "applies to the softmax score function only (moe_router_score_function is \"" +
                                             score + "\")");
  if (const auto factor = number_if(host, options, "moe_expert_capacity_factor")) {
    if (!std::isfinite(*factor) || *factor <= 0)
      bad_option("moe_expert_capacity_factor",
                 "must be a finite number > 0 (leave it out for dropless routing), got " + number_text(*factor));
    c.capacity_factor = *factor;
  }
  const std::string policy = string_if(host, options, "moe_token_drop_policy").value_or("probs");
  if (policy != "probs" && policy != "position")
    bad_option("moe_token_drop_policy", "must be \"probs\" or \"position\", got \"" + policy + "\"");
  c.drop_by_position = policy == "position";
  c.shared_ffn = host.config_int_if(options, "moe_shared_expert_intermediate_size").value_or(0);
  if (c.shared_ffn < 0)
    bad_option("moe_shared_expert_intermediate_size",
               "must be >= 0 (0: no shared experts), got " + std::to_string(c.shared_ffn));
  c.groups = host.config_int_if(options, "moe_router_num_groups").value_or(0);
  c.group_topk = host.config_int_if(options, "moe_router_group_topk").value_or(0);
  if (c.groups < 0 || c.group_topk < 0)
    bad_option(c.groups < 0 ? "moe_router_num_groups" : "moe_router_group_topk",
               "must be >= 0 (0: no group-limited routing), got " + std::to_string(std::min(c.groups, c.group_topk)));
  if ((c.groups > 0) != (c.group_topk > 0))
    bad_option(c.groups > 0 ? "moe_router_group_topk" : "moe_router_num_groups",
               "must be set too: group-limited routing needs both moe_router_num_groups and moe_router_group_topk");
  if (c.groups > 0) {
    if (c.experts % c.groups != 0)
      bad_option("moe_router_num_groups", '(' + std::to_string(c.groups) + ") must divide num_moe_experts (" +
                                              std::to_string(c.experts) + ")");
    if (c.group_topk > c.groups)
      bad_option("moe_router_group_topk", '(' + std::to_string(c.group_topk) +
                                              ") must not exceed moe_router_num_groups (" + std::to_string(c.groups) + ")");
    if (c.topk < c.group_topk || c.topk > c.group_topk * (c.experts / c.groups))
      bad_option("moe_router_topk", '(' + std::to_string(c.topk) + ") must be between moe_router_group_topk (" +
                                        std::to_string(c.group_topk) + ") and the experts of the chosen groups (" +
                                        std::to_string(c.group_topk * (c.experts / c.groups)) + ")");
  }
  c.expert_bias = host.config_bool_if(options, "moe_router_enable_expert_bias").value_or(false);
  // A host before ABI 1.5 would train a buffer like a weight and never call after_step.
  if (c.expert_bias && PLX_VERSION_MINOR(host.abi_version()) < 5)
    bad_option("moe_router_enable_expert_bias", "needs a host with ABI 1.5 or newer (buffers and after_step); this "
                                                "host implements ABI 1." +
                                                    std::to_string(PLX_VERSION_MINOR(host.abi_version())));
  // Megatron's TransformerConfig refuses it too: the bias is defined on sigmoid scores.
  if (c.expert_bias && c.score != ScoreFunction::sigmoid)
    bad_option("moe_router_enable_expert_bias",
               "applies to the sigmoid score function only, as in Megatron-LM "
               "(set moe_router_score_function to \"sigmoid\"; it is \"" +
                   score + "\")");
  c.bias_update_rate = number_if(host, options, "moe_router_bias_update_rate").value_or(1e-3);
  if (const auto factor = number_if(host, options, "moe_router_topk_scaling_factor")) {
    if (!std::isfinite(*factor) || *factor <= 0)
      bad_option("moe_router_topk_scaling_factor",
                 "must be a finite number > 0 (leave it out for none), got " + number_text(*factor));
    c.topk_scaling_factor = *factor;
  }
  c.shared_expert_gate = host.config_bool_if(options, "moe_shared_expert_gate").value_or(false);
  c.grouped_gemm = host.config_bool_if(options, "moe_grouped_gemm").value_or(false);
  if (c.shared_expert_gate && c.shared_ffn == 0)
    bad_option("moe_shared_expert_gate",
               "needs a shared expert (moe_shared_expert_intermediate_size > 0), as in Megatron-LM");
  if (!std::isfinite(c.bias_update_rate) || c.bias_update_rate < 0)
    bad_option("moe_router_bias_update_rate", "must be a finite number >= 0, got " + number_text(c.bias_update_rate));
  c.aux_loss_coeff = coefficient(host, options, "moe_aux_loss_coeff");
  c.z_loss_coeff = coefficient(host, options, "moe_z_loss_coeff");
  return c;
}

int64_t MoeConfig::capacity(int64_t tokens) const {
  if (capacity_factor <= 0) return tokens * topk;
  // Megatron's get_capacity(T k, E, factor): ceil(T k / E * factor).
  return static_cast<int64_t>(std::ceil(static_cast<double>(tokens * topk) / static_cast<double>(experts) *
                                        capacity_factor));
}

const char* options_schema() {
  return R"json({"type": "object", "doc": "A mixture-of-experts MLP (Megatron-LM's MoELayer): pre_mlp_layernorm, a top-k router and num_moe_experts expert MLPs, dropless. Option names and defaults are Megatron-LM's.", "properties": {)json"
         R"json("num_moe_experts": {"type": "integer", "minimum": 1, "default": 8, "doc": "E, the number of experts"}, )json"
         R"json("moe_router_topk": {"type": "integer", "minimum": 1, "default": 2, "doc": "k, the experts each token is sent to (at most num_moe_experts)"}, )json"
         R"json("moe_ffn_hidden_size": {"type": "integer", "minimum": 0, "default": 0, "doc": "each expert's MLP width; 0: model.ffn_hidden_size"}, )json"
         R"json("moe_router_pre_softmax": {"type": "boolean", "default": false, "doc": "softmax over all experts before the top-k (the selected probabilities are not renormalized); default: softmax over the k selected logits"}, )json"
         R"json("moe_router_score_function": {"type": "string", "enum": ["softmax", "sigmoid"], "default": "softmax", "doc": "softmax, or sigmoid with the k selected scores normalized to sum 1 (when k > 1)"}, )json"
         R"json("moe_aux_loss_coeff": {"type": "number", "minimum": 0, "default": 0, "doc": "the load-balancing loss E coeff / (k T^2) sum_i (sum_t p_ti) count_i; 0: off"}, )json"
         R"json("moe_z_loss_coeff": {"type": "number", "minimum": 0, "default": 0, "doc": "the router z-loss coeff * mean_t logsumexp(logits_t)^2; 0: off"}, )json"
         R"json("moe_expert_capacity_factor": {"type": "number", "exclusive_minimum": 0, "doc": "each expert takes at most ceil(T k / E * factor) of a microbatch's (token, choice) pairs, the rest are dropped (their probability counts as 0); absent: dropless"}, )json"
         R"json("moe_token_drop_policy": {"type": "string", "enum": ["probs", "position"], "default": "probs", "doc": "with a capacity: an expert keeps the pairs of highest probability, or the earliest tokens"}, )json"
         R"json("moe_shared_expert_intermediate_size": {"type": "integer", "minimum": 0, "default": 0, "doc": "the width of a shared expert MLP every token passes through, added to the routed experts' output; 0: none"}, )json"
         R"json("moe_router_num_groups": {"type": "integer", "minimum": 0, "default": 0, "doc": "group-limited routing: the experts in this many equal groups (must divide num_moe_experts); 0: off"}, )json"
         R"json("moe_router_group_topk": {"type": "integer", "minimum": 0, "default": 0, "doc": "group-limited routing: a token chooses among this many groups, those whose k / group_topk largest scores sum highest"}, )json"
         R"json("moe_router_enable_expert_bias": {"type": "boolean", "default": false, "doc": "aux-loss-free load balancing (sigmoid scores only, as in Megatron-LM): a per-expert bias (mlp.router.expert_bias, state, not trained) added to the routing scores for the top-k selection only, updated after each step by moe_router_bias_update_rate * sign(mean count - count_i) over the step's tokens of all data-parallel ranks"}, )json"
         R"json("moe_router_bias_update_rate": {"type": "number", "minimum": 0, "default": 0.001, "doc": "the expert bias's step per optimizer step"}, )json"
         R"json("moe_router_topk_scaling_factor": {"type": "number", "exclusive_minimum": 0, "doc": "the probabilities that weight the chosen experts' outputs multiplied by this after the score function (DeepSeek-V3: 2.5); absent: none"}, )json"
         R"json("moe_shared_expert_gate": {"type": "boolean", "default": false, "doc": "the shared expert's output multiplied per token by sigmoid(u . g), g = mlp.shared_experts.gate_weight [1, hidden_size] (needs moe_shared_expert_intermediate_size > 0)"}, )json"
         R"json("moe_grouped_gemm": {"type": "boolean", "default": false, "doc": "with checkpoint.names \"te\", name the experts as Megatron's TEGroupedMLP does (mlp.experts.linear_fc1.weight<i>, as its hybrid stack always does); the computation is the same"})json"
         R"json(}})json";
}

}  // namespace plexus::moe

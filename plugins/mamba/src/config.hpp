// What mamba.mixer reads and checks when it is created: its own options (Megatron-LM's names and
// defaults), the model section's keys it shares with the other layers, and the sizes derived
// from them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plexus/cpp/host.hpp"

namespace plexus::mamba {

// The component's name, used in every message.
inline constexpr const char* kComponent = "mamba.mixer";

struct MixerConfig {
  // From the model section.
  int64_t d_model = 0;      // hidden_size
  bool rms_prenorm = true;  // normalization: "RMSNorm", else "LayerNorm" (with a bias)
  double prenorm_eps = 1e-5;
  double init_std = 0.02;  // init_method_std

  // From the options (defaults: Megatron-LM's).
  int64_t state_dim = 128;  // N, mamba_state_dim
  int64_t head_dim = 64;    // P, mamba_head_dim
  int64_t groups = 8;       // G, mamba_num_groups
  int64_t heads = 0;        // H, mamba_num_heads or d_inner / P
  int64_t expand = 2;
  int64_t d_inner = 0;     // expand * d_model, or H * P when mamba_num_heads is given
  int64_t conv_width = 4;  // W, d_conv
  int64_t chunk = 128;     // Q, chunk_size
  double norm_eps = 1e-5;  // the gated grouped RMSNorm's eps
  double a_init_min = 1, a_init_max = 16;
  double dt_min = 0.001, dt_max = 0.1, dt_init_floor = 1e-4;
  std::optional<double> conv_init;

  // Tensor parallelism: the ranks of the "tp" group d_inner, heads and groups above are divided
  // over (each rank's share; 1: the whole mixer), and the whole mixer's sizes.
  int64_t tp = 1;
  int64_t whole_d_inner = 0, whole_heads = 0, whole_groups = 0;

  // The in_proj output, rows ordered [z, x, B, C, dt].
  int64_t in_proj_rows() const { return 2 * d_inner + 2 * groups * state_dim + heads; }
  // The channels of the causal convolution: x, B and C.
  int64_t conv_dim() const { return d_inner + 2 * groups * state_dim; }
  // Column offsets within one in_proj output row.
  int64_t xbc_offset() const { return d_inner; }
  int64_t dt_offset() const { return d_inner + conv_dim(); }
  int64_t heads_per_group() const { return heads / groups; }
  int64_t group_size() const { return d_inner / groups; }  // channels per group of the gated norm

  // Reads and checks everything; throws plexus::sdk::Error naming the option or model key and
  // what was expected. Absent options take their defaults (the engine fills them from the schema;
  // a host that does not validate gets the same values).
  static MixerConfig read(const plexus::sdk::Host& host, plx_config options, plx_config model);
  // Divides heads, groups and d_inner over the ranks of `group` ("tp", or "cp": the mixer under
  // context parallelism takes 1/cp of the heads; Megatron: heads % n, groups % n), each rank
  // holding whole groups of whole heads; throws naming the option that n does not divide.
  void split_over(int64_t ranks, const char* group = "tp");
  // This rank's share of the heads under context parallelism: a copy whose heads (and groups,
  // d_inner) are 1/cp of this config's, and whose "whole" sizes are this config's (the tp share
  // the cp ranks divide; the whole mixer without tp). Megatron's rule, heads % (tp cp) and
  // groups % (tp cp), refused naming the option and both sizes.
  MixerConfig split_over_cp(int64_t cp_ranks) const;

 private:
  void split_heads(int64_t ranks, const std::string& over);
};

// The options' schema (JSON text, the subset docs/config.md describes), built from the same
// defaults MixerConfig::read uses.
const char* options_schema();

}  // namespace plexus::mamba

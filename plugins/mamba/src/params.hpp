// The parameters of mamba.mixer: names (Megatron-LM's local spec, relative to the layer's prefix),
// shapes, initialization, weight decay; and the initializers the host has no standard form for.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config.hpp"
#include "plexus/layer.h"

namespace plexus::mamba {

// Where each parameter is in the layer's list (norm.bias exists with a LayerNorm pre-norm only).
struct ParamIndex {
  static constexpr uint32_t kAbsent = UINT32_MAX;
  uint32_t norm_weight = 0, norm_bias = kAbsent, in_proj = 0, conv_weight = 0, conv_bias = 0, dt_bias = 0,
           a_log = 0, d = 0, gated_norm_weight = 0, out_proj = 0;
};

struct ParamList {
  std::vector<plx_param_spec> specs;
  ParamIndex index;
  // The whole parts of the tensor-parallel parameters (plx_param_spec.tp_part_sizes points here:
  // on the heap, so the specs stay valid when the list moves).
  std::shared_ptr<std::vector<std::vector<int64_t>>> parts =
      std::make_shared<std::vector<std::vector<int64_t>>>();
};

// num_layers: the depth of the stack (the create args'), which scales out_proj's initialization.
ParamList declare_params(const MixerConfig& config, uint32_t num_layers);

// Fills a PLX_INIT_CUSTOM parameter (A_log, dt_bias) from `seed` alone (a counter-based draw per
// element), so the values do not depend on the device or the order of initialization. `value` is
// a contiguous float32 or float64 CPU tensor of the WHOLE parameter's shape (ABI 1.8: under tensor
// parallelism the host initializes the whole tensor and keeps each rank's shard).
void init_custom_param(const MixerConfig& config, const ParamList& params, uint32_t index, DLTensor& value,
                       uint64_t seed);

}  // namespace plexus::mamba

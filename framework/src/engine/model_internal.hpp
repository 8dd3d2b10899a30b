// The Model's private structures, shared by the files that implement it.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "plexus/core/engine/model.hpp"

namespace plexus {

enum class UnitRole { embedding, decoder, final_norm, head };

struct Model::Unit {
  std::string label;  // for messages: "decoder.layers.2 attention (transformer.attention)"
  UnitRole role = UnitRole::decoder;
  std::unique_ptr<ConfigHandle> config;
  std::unique_ptr<LayerInstance> layer;
  std::vector<std::size_t> params;  // indices into the ParameterStore, in the layer's order
  std::vector<DLTensor> param_views;
  std::vector<DLTensor> grad_views;
  std::vector<plx_stage_info> stages;
  uint32_t num_outputs = 0;
};

// One microbatch in flight: its layer states and the buffers between units.
struct Model::Run {
  const Batch* batch = nullptr;
  bool training = false;
  uint32_t microbatch = 0;
  Tensor loss_scale;                       // [1]: dL/dloss for the head's backward
  std::vector<std::unique_ptr<LayerInstance::State>> states;
  std::vector<std::vector<Tensor>> outputs;  // per unit, allocated at its first stage
  Tensor stream;                           // the residual stream [B, S, C]
  Tensor grad;                             // its gradient, during backward
  std::vector<Tensor> grad_inputs;         // per unit: the gradient a unit writes
  uint32_t forward_unit = 0, forward_stage = 0;  // the next forward call expected
  int64_t backward_unit = -1;
  uint32_t backward_stage = 0;
  double loss = 0;
  bool finished_forward = false;
};

}  // namespace plexus

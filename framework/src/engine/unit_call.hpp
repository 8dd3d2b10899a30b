// The ABI side of a unit's stage: the argument structs of plx_layer_v1's forward, backward and
// backward_weights filled from the engine's tensors, the outputs allocated as the layer describes
// them, and the check of what a unit produced. The stages in model_run.cpp say what goes in and
// where it goes; this file says how it crosses the boundary.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_internal.hpp"

namespace plexus {

// The layers' views of their parameters and gradients, taken again before every call: under a
// data-parallel strategy the store's tensors point into buffers that change between calls.
void refresh_views(Model::Unit& unit, const ParameterStore& params);

// The unit's outputs for these inputs, as its layer describes them. The embedding's input is
// integer, so its output has no dtype to follow: it gets the model's activation dtype
// (run.precision), and every later unit follows its input.
std::vector<Tensor> allocate_outputs(const Model::Unit& unit, const std::vector<DLTensor>& inputs,
                                     DLDataType activation_dtype, DLDevice device);

struct ForwardCall {
  uint32_t microbatch = 0;
  bool training = false;
};
void call_forward(Model::Unit& unit, const ParameterStore& params, LayerInstance::State& state,
                  uint32_t stage, const ForwardCall& call, const std::vector<DLTensor>& inputs,
                  std::vector<Tensor>& outputs);

struct BackwardCall {
  uint32_t microbatch = 0;
  double loss_scale = 1.0;         // plx_backward_args.loss_scale
  bool skip_weight_grads = false;  // PLX_BACKWARD_SKIP_WEIGHT_GRADS: backward_weights follows
};
void call_backward(Model::Unit& unit, const ParameterStore& params, LayerInstance::State& state,
                   uint32_t stage, const BackwardCall& call, std::vector<DLTensor>& grad_outputs,
                   std::vector<DLTensor>& grad_inputs);
// The weight gradients a backward with skip_weight_grads left out (no gradients in or out).
void call_backward_weights(Model::Unit& unit, const ParameterStore& params, LayerInstance::State& state,
                           uint32_t microbatch, double loss_scale);

// Throws NonFiniteError naming the unit when its first output holds a NaN or infinity.
void check_output_finite(const Model::Unit& unit, const std::vector<Tensor>& outputs, uint32_t microbatch);

}  // namespace plexus

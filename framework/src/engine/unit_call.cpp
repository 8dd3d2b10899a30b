#include "engine/unit_call.hpp"

#include <string>

#include "engine/device_ops.hpp"

namespace plexus {

void refresh_views(Model::Unit& unit, const ParameterStore& params) {
  for (std::size_t k = 0; k < unit.params.size(); ++k) {
    unit.param_views[k] = params[unit.params[k]].value.view();
    unit.grad_views[k] = params[unit.params[k]].grad.view();
  }
}

std::vector<Tensor> allocate_outputs(const Model::Unit& unit, const std::vector<DLTensor>& inputs,
                                     DLDataType activation_dtype, DLDevice device) {
  std::vector<plx_tensor_desc> descs;
  for (const DLTensor& t : inputs) {
    plx_tensor_desc d{};
    d.ndim = static_cast<uint32_t>(t.ndim);
    d.dtype = t.dtype;
    for (int i = 0; i < t.ndim; ++i) d.dims[i] = t.shape[i];
    descs.push_back(d);
  }
  std::vector<Tensor> outputs;
  for (plx_tensor_desc d : unit.layer->output_desc(descs)) {
    if (unit.role == UnitRole::embedding && outputs.empty()) d.dtype = activation_dtype;
    outputs.emplace_back(std::vector<int64_t>(d.dims, d.dims + d.ndim), d.dtype, device);
  }
  return outputs;
}

void call_forward(Model::Unit& unit, const ParameterStore& params, LayerInstance::State& state,
                  uint32_t stage, const ForwardCall& call, const std::vector<DLTensor>& inputs,
                  std::vector<Tensor>& outputs) {
  std::vector<DLTensor> out_views;
  for (const Tensor& t : outputs) out_views.push_back(t.view());
  plx_forward_args args{};
  args.struct_size = sizeof(args);
  args.microbatch = call.microbatch;
  args.flags = call.training ? PLX_FORWARD_TRAINING : 0u;
  args.num_inputs = static_cast<uint32_t>(inputs.size());
  args.inputs = inputs.data();
  args.num_outputs = static_cast<uint32_t>(out_views.size());
  args.outputs = out_views.data();
  refresh_views(unit, params);
  args.num_params = static_cast<uint32_t>(unit.param_views.size());
  args.params = unit.param_views.data();
  unit.layer->forward(state, stage, args);
}

void call_backward(Model::Unit& unit, const ParameterStore& params, LayerInstance::State& state,
                   uint32_t stage, const BackwardCall& call, std::vector<DLTensor>& grad_outputs,
                   std::vector<DLTensor>& grad_inputs) {
  plx_backward_args args{};
  args.struct_size = sizeof(args);
  args.microbatch = call.microbatch;
  args.num_outputs = static_cast<uint32_t>(grad_outputs.size());
  args.grad_outputs = grad_outputs.data();
  args.num_inputs = static_cast<uint32_t>(grad_inputs.size());
  args.grad_inputs = grad_inputs.data();
  refresh_views(unit, params);
  args.num_params = static_cast<uint32_t>(unit.param_views.size());
  args.params = unit.param_views.data();
  args.param_grads = unit.grad_views.data();
  args.loss_scale = call.loss_scale;
  if (call.skip_weight_grads) args.flags = PLX_BACKWARD_SKIP_WEIGHT_GRADS;
  unit.layer->backward(state, stage, args);
}

void call_backward_weights(Model::Unit& unit, const ParameterStore& params, LayerInstance::State& state,
                           uint32_t microbatch, double loss_scale) {
  plx_backward_args args{};
  args.struct_size = sizeof(args);
  args.microbatch = microbatch;
  refresh_views(unit, params);
  args.num_params = static_cast<uint32_t>(unit.param_views.size());
  args.params = unit.param_views.data();
  args.param_grads = unit.grad_views.data();
  args.loss_scale = loss_scale;
  unit.layer->backward_weights(state, args);
}

void check_output_finite(const Model::Unit& unit, const std::vector<Tensor>& outputs, uint32_t microbatch) {
  if (const int64_t bad = device_ops::first_non_finite(outputs[0]); bad >= 0)
    throw NonFiniteError("non-finite value in the output of " + unit.label + " (element " +
                         std::to_string(bad) + ", microbatch " + std::to_string(microbatch) +
                         "): the first layer that produced one");
}

}  // namespace plexus

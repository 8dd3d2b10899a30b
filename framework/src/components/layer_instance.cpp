#include <string>

#include "plexus/core/components.hpp"

namespace plexus {

LayerInstance::LayerInstance(const Component& component, const plx_layer_create_args& args)
    : component_(&component), table_(&component.as<plx_layer_v1>()) {
  if (component.kind != PLX_KIND_LAYER)
    throw ComponentCallError(PLX_ERR_INVALID_ARGUMENT, "component '" + component.name + "' is a " +
                                                           kind_name(component.kind) + ", not a layer");
  HostServices::clear_last_error();
  check_call(component, "create", table_->create(&args, &layer_));
}

LayerInstance::~LayerInstance() {
  if (layer_ != nullptr) table_->destroy(layer_);
}

plx_layer_info LayerInstance::info() const {
  plx_layer_info out{};
  out.struct_size = sizeof(out);
  check_call(*component_, "get_info", table_->get_info(layer_, &out));
  return out;
}

plx_param_spec LayerInstance::param(uint32_t index) const {
  plx_param_spec out{};
  out.struct_size = sizeof(out);
  check_call(*component_, "get_param", table_->get_param(layer_, index, &out));
  return out;
}

plx_stage_info LayerInstance::stage(uint32_t index) const {
  plx_stage_info out{};
  out.struct_size = sizeof(out);
  check_call(*component_, "get_stage", table_->get_stage(layer_, index, &out));
  return out;
}

std::vector<plx_tensor_desc> LayerInstance::output_desc(const std::vector<plx_tensor_desc>& inputs) const {
  std::vector<plx_tensor_desc> outputs(info().num_outputs);
  check_call(*component_, "output_desc",
             table_->output_desc(layer_, static_cast<uint32_t>(inputs.size()), inputs.data(),
                                 static_cast<uint32_t>(outputs.size()), outputs.data()));
  return outputs;
}

std::optional<LayerInstance::Flops> LayerInstance::estimate_flops(const std::vector<plx_tensor_desc>& inputs) const {
  // The host's table copy is zero-extended: a plugin built before 1.1 reads as NULL here.
  if (table_->estimate_flops == nullptr) return std::nullopt;
  Flops flops;
  const plx_status status = table_->estimate_flops(layer_, static_cast<uint32_t>(inputs.size()), inputs.data(),
                                                   &flops.forward, &flops.backward);
  if (status == PLX_ERR_UNSUPPORTED) {
    HostServices::clear_last_error();
    return std::nullopt;
  }
  check_call(*component_, "estimate_flops", status);
  return flops;
}

std::optional<double> LayerInstance::estimate_activation_bytes(const std::vector<plx_tensor_desc>& inputs,
                                                               uint32_t cp_size) const {
  if (table_->estimate_activation_bytes == nullptr) return std::nullopt;  // a plugin before 1.10
  plx_activation_query query{};
  query.struct_size = sizeof(query);
  query.cp_size = cp_size;
  double bytes = 0;
  const plx_status status = table_->estimate_activation_bytes(layer_, static_cast<uint32_t>(inputs.size()),
                                                              inputs.data(), &query, &bytes);
  if (status == PLX_ERR_UNSUPPORTED) {
    HostServices::clear_last_error();
    return std::nullopt;
  }
  check_call(*component_, "estimate_activation_bytes", status);
  return bytes;
}

void LayerInstance::init_param(uint32_t index, DLTensor& value, uint64_t seed) const {
  if (table_->init_param == nullptr)
    throw ComponentCallError(PLX_ERR_UNSUPPORTED, component_->name + ": parameter " + std::to_string(index) +
                                                      " asks for a custom initializer (PLX_INIT_CUSTOM) but the "
                                                      "layer has no init_param");
  check_call(*component_, "init_param", table_->init_param(layer_, index, &value, seed));
}

void LayerInstance::after_step(int64_t step, std::vector<DLTensor>& params) const {
  // The host's table copy is zero-extended: a plugin built before 1.5 reads as NULL here.
  if (table_->after_step == nullptr) return;
  plx_step_args args{};
  args.struct_size = sizeof(args);
  args.num_params = static_cast<uint32_t>(params.size());
  args.step = step;
  args.params = params.data();
  check_call(*component_, "after_step", table_->after_step(layer_, &args));
}

LayerInstance::State::~State() { owner_->table_->state_destroy(owner_->layer_, state_); }

std::unique_ptr<LayerInstance::State> LayerInstance::create_state(uint32_t microbatch) const {
  void* state = nullptr;
  check_call(*component_, "state_create", table_->state_create(layer_, microbatch, &state));
  return std::make_unique<State>(*this, state);
}

void LayerInstance::forward(State& state, uint32_t stage, const plx_forward_args& args) const {
  check_call(*component_, "forward", table_->forward(layer_, state.get(), stage, &args));
}

void LayerInstance::backward(State& state, uint32_t stage, const plx_backward_args& args) const {
  check_call(*component_, "backward", table_->backward(layer_, state.get(), stage, &args));
}

void LayerInstance::backward_weights(State& state, const plx_backward_args& args) const {
  if (table_->backward_weights == nullptr)
    throw ComponentCallError(PLX_ERR_UNSUPPORTED, component_->name + " has no backward_weights");
  check_call(*component_, "backward_weights", table_->backward_weights(layer_, state.get(), &args));
}

}  // namespace plexus

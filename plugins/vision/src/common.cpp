#include "common.hpp"

#include <cmath>
#include <sstream>

namespace plexus::vision {

namespace {
std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
}  // namespace

int64_t model_positive_int(const plexus::sdk::Host& host, plx_config model, const char* key,
                           const char* component) {
  const int64_t v = host.config_int(model, key);
  if (v < 1)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string(component) + ": model." + key + " must be at least 1, got " + std::to_string(v));
  return v;
}

double model_positive_number(const plexus::sdk::Host& host, plx_config model, const char* key,
                             const char* component) {
  const double v = host.config_number(model, key);
  if (!(v > 0) || !std::isfinite(v))
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(component) + ": model." + key +
                                              " must be a positive number, got " + number_text(v));
  return v;
}

int64_t option_int(const plexus::sdk::Host& host, plx_config options, const char* key, int64_t fallback,
                   int64_t minimum, const char* component) {
  const int64_t v = options == nullptr ? fallback : host.config_int_if(options, key).value_or(fallback);
  if (v < minimum)
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(component) + ": option " + key + " must be at least " +
                                              std::to_string(minimum) + ", got " + std::to_string(v));
  return v;
}

Precision precision_of(DLDataType dtype, const char* component, const std::string& what) {
  if (plx_dtype_equal(dtype, plx_dtype_f32())) return Precision::f32;
  if (plx_dtype_equal(dtype, plx_dtype_f64())) return Precision::f64;
  throw Error(PLX_ERR_UNSUPPORTED, std::string(component) + ": " + what +
                                       ": expected dtype float32 or float64 (the CPU path), got " +
                                       plexus::sdk::dtype_name(dtype));
}

plx_param_spec make_param(const char* name, std::initializer_list<int64_t> dims, uint32_t init,
                          double std_dev, uint32_t flags) {
  plx_param_spec p{};
  p.struct_size = sizeof(p);
  p.flags = flags;
  p.name = name;
  p.desc.dtype = plx_dtype_f32();
  for (int64_t d : dims) p.desc.dims[p.desc.ndim++] = d;
  p.init = init;
  p.init_a = std_dev;
  return p;
}

VisionLayer::VisionLayer(const char* component, const plx_layer_create_args& args, uint32_t num_inputs)
    : component_(component), device_(args.device), num_inputs_(num_inputs) {
  if (device_.device_type != kDLCPU)
    throw Error(PLX_ERR_UNSUPPORTED, std::string(component) + " runs on the CPU only (" +
                                         plexus::sdk::device_text(device_) + " requested)");
  const auto host = plexus::sdk::Host::current();
  // The layers are whole. Under tensor parallelism (the encoder's transformer layers split over
  // its tp group) every tp rank computes them whole on the same input, as Megatron's CLIP computes
  // its conv1 (a plain nn.Conv2d) on every tp rank: their parameters and gradients are the same on
  // each, and nothing is split or reduced.
  hidden_ = model_positive_int(host, args.model_config, "hidden_size", component);
  init_std_ = model_positive_number(host, args.model_config, "init_method_std", component);
}

plx_layer_info VisionLayer::info() const {
  plx_layer_info i{};
  i.struct_size = sizeof(i);
  i.flags = 0;
  i.num_params = static_cast<uint32_t>(params_.size());
  i.num_stages = 1;
  i.num_inputs = num_inputs_;
  i.num_outputs = 1;
  return i;
}

plx_param_spec VisionLayer::param(uint32_t index) const {
  if (index >= params_.size())
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(component_) + " has " + std::to_string(params_.size()) +
                                              " parameters; there is no parameter " + std::to_string(index));
  return params_[index];
}

plx_stage_info VisionLayer::stage(uint32_t index) const {
  if (index != 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                std::string(component_) + " has one stage; no stage " + std::to_string(index));
  plx_stage_info s{};
  s.struct_size = sizeof(s);
  s.kind = PLX_STAGE_COMPUTE;
  s.name = component_;
  return s;
}

void VisionLayer::refuse(const std::string& message) const {
  throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(component_) + ": " + message);
}

void VisionLayer::expect_descs(uint32_t num_inputs, uint32_t num_outputs) const {
  if (num_inputs != num_inputs_ || num_outputs != 1)
    refuse("takes " + std::to_string(num_inputs_) + " input(s) and 1 output, got " +
           std::to_string(num_inputs) + " and " + std::to_string(num_outputs));
}

void VisionLayer::expect_call(uint32_t stage, uint32_t num_inputs, uint32_t num_outputs,
                              uint32_t num_params) const {
  if (stage != 0) refuse("has one stage; no stage " + std::to_string(stage));
  expect_descs(num_inputs, num_outputs);
  if (num_params != params_.size())
    refuse("has " + std::to_string(params_.size()) + " parameters, got " + std::to_string(num_params));
}

void VisionLayer::expect_params(const DLTensor* params, const DLTensor* grads, DLDataType dtype) const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const plx_param_spec& spec = params_[i];
    const auto ndim = static_cast<int64_t>(spec.desc.ndim);
    const std::string name = std::string(component_) + ": parameter " + spec.name;
    expect_tensor(params[i], device_, dtype, spec.desc.dims, ndim, name);
    if (grads != nullptr && grads[i].data != nullptr)
      expect_tensor(grads[i], device_, dtype, spec.desc.dims, ndim, "gradient of " + name);
  }
}

void VisionLayer::expect_saved(bool saved, Precision saved_precision, Precision precision,
                               int64_t saved_batch, int64_t saved_seq, int64_t batch, int64_t seq) const {
  if (!saved)
    refuse("backward without a training forward of this microbatch (PLX_FORWARD_TRAINING was not set)");
  if (saved_precision != precision)
    refuse(std::string("backward in ") + precision_name(precision) + " after a forward in " +
           precision_name(saved_precision));
  if (saved_batch != batch || saved_seq != seq)
    refuse("backward of shape [" + std::to_string(batch) + ", " + std::to_string(seq) +
           "] after a forward of [" + std::to_string(saved_batch) + ", " + std::to_string(saved_seq) + "]");
}

}  // namespace plexus::vision

// example.scaled_tanh: y = alpha * tanh(beta * x), elementwise on fp32 CPU tensors.
//
//   alpha  one learnable scalar parameter (owned, initialized and optimized by the host)
//   beta   a fixed input scale from the layer's config
//
// It shows the pieces every C++ layer has: a config schema, reading the validated config through
// the host, a parameter declaration, per-microbatch state for backward, and errors thrown as
// plexus::sdk::Error (the SDK's trampolines turn them into a status plus a message for the host,
// so no exception ever crosses the C boundary).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/cpp/plugin.hpp"
#include "plexus/cpp/tensor.hpp"

namespace {

using plexus::sdk::Error;

// The schema of the layer's config section. The host validates the user's config against it
// and fills in the defaults before create(), so the constructor can read both keys
// unconditionally. Plexus schemas use "doc" (not "description"), and unknown keys are errors.
constexpr const char* kConfigSchema = R"({
  "type": "object",
  "doc": "y = alpha * tanh(beta * x); alpha is learned, beta is fixed",
  "properties": {
    "beta": {
      "type": "number", "default": 1.0, "exclusive_minimum": 0,
      "doc": "fixed input scale: the slope of the layer at x = 0 is alpha * beta"
    },
    "init_alpha": {
      "type": "number", "default": 1.0, "minimum": 0,
      "doc": "initial value of the learnable output scale alpha"
    }
  }
})";

// Saved by a training forward for the backward of the same microbatch. It lives in a state
// object, not in the layer, so several microbatches can be in flight at once.
class TanhState : public plexus::sdk::LayerState {
 public:
  std::vector<float> tanh_values;  // tanh(beta * x): enough to differentiate both x and alpha
  bool saved = false;
};

std::string shape_string(const DLTensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

void expect_same_shape(const DLTensor& a, const char* a_name, const DLTensor& b, const char* b_name) {
  bool same = a.ndim == b.ndim;
  for (int i = 0; same && i < a.ndim; ++i) same = a.shape[i] == b.shape[i];
  if (!same)
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(a_name) + " has shape " + shape_string(a) + " but " +
                                              b_name + " has shape " + shape_string(b));
}

// Every tensor this layer touches must be a contiguous fp32 CPU tensor.
void expect_f32(const DLTensor& t, const char* what) {
  plexus::sdk::expect_cpu_contiguous(t, plx_dtype_f32(), what);
}

class ScaledTanh : public plexus::sdk::Layer {
 public:
  explicit ScaledTanh(const plx_layer_create_args& args) {
    if (args.device.device_type != kDLCPU)
      throw Error(PLX_ERR_UNSUPPORTED, "example.scaled_tanh runs on the CPU only");
    const plexus::sdk::Host host = plexus::sdk::Host::current();
    beta_ = host.config_number(args.config, "beta");
    init_alpha_ = host.config_number(args.config, "init_alpha");
  }

  plx_layer_info info() const override {
    plx_layer_info i{};
    i.struct_size = sizeof(i);
    i.num_params = 1;
    i.num_stages = 1;
    i.num_inputs = 1;
    i.num_outputs = 1;
    return i;
  }

  // One scalar, initialized by the host to init_alpha. A scale is not a weight to decay.
  plx_param_spec param(uint32_t index) const override {
    if (index != 0) throw Error(PLX_ERR_INVALID_ARGUMENT, "no parameter " + std::to_string(index));
    return plexus::sdk::param_spec("alpha", {1}, PLX_INIT_CONSTANT, init_alpha_, PLX_PARAM_NO_WEIGHT_DECAY);
  }

  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    expect_counts("output_desc", num_inputs, num_outputs);
    if (!plx_dtype_equal(inputs[0].dtype, plx_dtype_f32()))
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "input 0: expected dtype float32, got " + plexus::sdk::dtype_name(inputs[0].dtype));
    outputs[0] = inputs[0];  // elementwise: same shape and dtype
  }

  std::unique_ptr<plexus::sdk::LayerState> create_state(uint32_t /*microbatch*/) override {
    return std::make_unique<TanhState>();
  }

  void forward(plexus::sdk::LayerState& state, uint32_t stage, const plx_forward_args& args) override {
    expect_stage(stage);
    expect_counts("forward", args.num_inputs, args.num_outputs);
    expect_params(args.num_params);
    const DLTensor& x = args.inputs[0];
    const DLTensor& y = args.outputs[0];
    const DLTensor& alpha = args.params[0];
    expect_f32(x, "input 0");
    expect_f32(y, "output 0");
    expect_f32(alpha, "parameter alpha");
    expect_same_shape(x, "input 0", y, "output 0");

    const auto n = static_cast<std::size_t>(plx_numel(&x));
    const float a = *plexus::sdk::data_as<const float>(alpha);
    const auto b = static_cast<float>(beta_);
    const float* in = plexus::sdk::data_as<const float>(x);
    float* out = plexus::sdk::data_as<float>(y);
    auto& s = static_cast<TanhState&>(state);
    // Only a training forward pays for keeping activations.
    s.saved = (args.flags & PLX_FORWARD_TRAINING) != 0;
    s.tanh_values.assign(s.saved ? n : 0, 0.0f);
    for (std::size_t i = 0; i < n; ++i) {
      const float t = std::tanh(b * in[i]);
      out[i] = a * t;
      if (s.saved) s.tanh_values[i] = t;
    }
  }

  // dL/dx = dy * alpha * beta * (1 - t^2)   (written)
  // dL/dalpha = sum(dy * t)                 (accumulated: microbatches add up)
  // This layer has no backward_weights, so the engine never splits weight gradients off
  // (PLX_BACKWARD_SKIP_WEIGHT_GRADS); both are computed here.
  void backward(plexus::sdk::LayerState& state, uint32_t stage, const plx_backward_args& args) override {
    expect_stage(stage);
    expect_counts("backward", args.num_inputs, args.num_outputs);
    expect_params(args.num_params);
    auto& s = static_cast<TanhState&>(state);
    if (!s.saved)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "backward of microbatch state without a training forward (PLX_FORWARD_TRAINING not set)");
    const DLTensor& dy = args.grad_outputs[0];
    const DLTensor& alpha = args.params[0];
    expect_f32(dy, "grad output 0");
    expect_f32(alpha, "parameter alpha");
    const auto n = static_cast<std::size_t>(plx_numel(&dy));
    if (n != s.tanh_values.size())
      throw Error(PLX_ERR_INVALID_ARGUMENT, "grad output 0 has " + std::to_string(n) +
                                                " elements but forward saw " +
                                                std::to_string(s.tanh_values.size()));
    const float* g = plexus::sdk::data_as<const float>(dy);
    const float* t = s.tanh_values.data();

    const DLTensor& dx = args.grad_inputs[0];
    if (dx.data != nullptr) {  // NULL data: the caller needs no input gradient
      expect_f32(dx, "grad input 0");
      expect_same_shape(dy, "grad output 0", dx, "grad input 0");
      const float scale = *plexus::sdk::data_as<const float>(alpha) * static_cast<float>(beta_);
      float* out = plexus::sdk::data_as<float>(dx);
      for (std::size_t i = 0; i < n; ++i) out[i] = g[i] * scale * (1.0f - t[i] * t[i]);
    }

    const DLTensor& dalpha = args.param_grads[0];
    if (dalpha.data != nullptr) {
      expect_f32(dalpha, "gradient of alpha");
      double sum = 0.0;  // a double accumulator keeps long reductions accurate
      for (std::size_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * static_cast<double>(t[i]);
      *plexus::sdk::data_as<float>(dalpha) += static_cast<float>(sum);
    }
  }

  // ABI 1.1 (optional): lets the trainer report FLOP utilization. Counting a tanh as one
  // operation: forward beta*x, tanh, alpha*t = 3 per element; backward t*t, 1-, *scale, *dy for
  // dx and dy*t, + for dalpha = 6 per element.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_counts("estimate_flops", num_inputs, 1);
    double n = 1;
    for (uint32_t d = 0; d < inputs[0].ndim; ++d) n *= static_cast<double>(inputs[0].dims[d]);
    forward = 3 * n;
    backward = 6 * n;
  }

 private:
  static void expect_stage(uint32_t stage) {
    if (stage != 0) throw Error(PLX_ERR_INVALID_ARGUMENT, "no stage " + std::to_string(stage));
  }
  static void expect_counts(const char* what, uint32_t inputs, uint32_t outputs) {
    if (inputs != 1 || outputs != 1)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(what) + ": expected 1 input and 1 output, got " +
                                                std::to_string(inputs) + " and " + std::to_string(outputs));
  }
  static void expect_params(uint32_t params) {
    if (params != 1)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "expected 1 parameter (alpha), got " + std::to_string(params));
  }

  double beta_ = 1.0;
  double init_alpha_ = 1.0;
};

const plx_component_desc kScaledTanh = plexus::sdk::layer_component<ScaledTanh>(
    "example.scaled_tanh", "y = alpha * tanh(beta * x) with a learnable alpha (fp32, CPU)", kConfigSchema);

}  // namespace

// The one exported symbol: the plugin's descriptor with its single component.
PLEXUS_PLUGIN("example_cpp", "1.0.0", "Example out-of-tree C++ plugin: a scaled tanh layer", &kScaledTanh)

// Shared by tests/unit/test_transformer_*.cpp: loads the real built transformer plugin, builds
// the model config, creates layers and runs them on host tensors of any dtype.
#pragma once

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/errors.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/plexus.h"

namespace tt {

namespace fs = std::filesystem;

// Loads this build's plugin `name` (lib/plexus/plugins/libplexus_<name>.so) into `host`, or
// throws saying which target to build.
inline void load_built_plugin(plexus::PluginHost& host, const std::string& name) {
  const fs::path file = std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins/libplexus_" + name + ".so";
  if (!fs::exists(file))
    throw std::runtime_error("the " + name + " plugin is not built: " + file.string() + " is missing (build the '" +
                             name + "' target, or the whole tree, first)");
  host.load(file);
}

// One host for the whole test program, with the transformer plugin loaded. It is destroyed (and
// the plugin unloaded) at exit, so a plugin that cannot be unloaded cleanly fails the test run.
inline plexus::PluginHost& host() {
  static plexus::PluginHost instance;
  static const bool loaded = [] {
    load_built_plugin(instance, "transformer");
    return true;
  }();
  (void)loaded;
  return instance;
}

inline const plexus::Component& component(const std::string& name) {
  return host().get(PLX_KIND_LAYER, name);
}

// The model section the engine hands every layer (validated and default-filled there).
struct Model {
  int64_t vocab_size = 11;
  int64_t hidden_size = 12;
  int64_t num_layers = 2;
  int64_t num_attention_heads = 3;
  int64_t num_query_groups = 3;
  int64_t ffn_hidden_size = 10;
  int64_t seq_length = 8;
  std::string normalization = "RMSNorm";
  double layernorm_epsilon = 1e-5;
  double rotary_base = 10000.0;
  std::string activation = "gelu";
  double init_method_std = 0.02;
  bool untie_embeddings_and_output_weights = false;
  std::string attention_backend = "auto";
  std::string position_embedding_type = "rope";

  boost::json::object json() const {
    boost::json::object o;
    o["vocab_size"] = vocab_size;
    o["hidden_size"] = hidden_size;
    o["num_layers"] = num_layers;
    o["num_attention_heads"] = num_attention_heads;
    o["num_query_groups"] = num_query_groups;
    o["ffn_hidden_size"] = ffn_hidden_size;
    o["seq_length"] = seq_length;
    o["normalization"] = normalization;
    o["layernorm_epsilon"] = layernorm_epsilon;
    o["rotary_base"] = rotary_base;
    o["activation"] = activation;
    o["init_method_std"] = init_method_std;
    o["untie_embeddings_and_output_weights"] = untie_embeddings_and_output_weights;
    o["attention_backend"] = attention_backend;
    o["position_embedding_type"] = position_embedding_type;
    return o;
  }
};

// A layer component created as the engine creates one (layer 0 of num_layers), with the config
// nodes it was created from: its options (at options_path, for messages) and the model section.
struct ComponentLayer {
  plexus::ConfigHandle config;
  plexus::ConfigHandle model;
  std::unique_ptr<plexus::LayerInstance> instance;

  // residual_layers: the create args' (ABI 1.6); 0 as from a host before it.
  ComponentLayer(const plexus::Component& component, boost::json::value options,
                 const std::string& options_path, boost::json::value model_section, uint32_t num_layers,
                 DLDevice device, uint32_t residual_layers = 0)
      : config(std::move(options), options_path), model(std::move(model_section), "model") {
    plx_layer_create_args args{};
    args.struct_size = sizeof(args);
    args.layer_index = 0;
    args.num_layers = num_layers;
    args.residual_layers = residual_layers;
    args.device = device;
    args.config = config.get();
    args.model_config = model.get();
    instance = std::make_unique<plexus::LayerInstance>(component, args);
  }
  const plexus::LayerInstance& operator*() const { return *instance; }
  const plexus::LayerInstance* operator->() const { return instance.get(); }
};

// A transformer layer with no options of its own.
struct Layer : ComponentLayer {
  Layer(const std::string& name, const Model& m, DLDeviceType device = kDLCPU)
      : ComponentLayer(component(name), boost::json::object{}, "model.layer.options", m.json(),
                       static_cast<uint32_t>(m.num_layers), DLDevice{device, 0}) {}
};

// The index of the parameter named `name`, failing the test when the layer has none.
inline std::size_t param_index(const plexus::LayerInstance& layer, const std::string& name) {
  for (uint32_t i = 0; i < layer.info().num_params; ++i)
    if (name == layer.param(i).name) return i;
  BOOST_FAIL("the layer has no parameter " << name);
  return 0;
}

// A host tensor of float32, float64 or int32 values; values are held as double (or int32) and
// converted when a view of another dtype is asked for.
struct Tensor {
  std::vector<int64_t> shape;
  DLDataType dtype = plx_dtype_f64();
  std::vector<double> f64;
  std::vector<float> f32;
  std::vector<int32_t> i32;
  bool null_data = false;  // a view with data == NULL ("not needed")

  Tensor() = default;
  Tensor(std::vector<int64_t> s, DLDataType t) : shape(std::move(s)), dtype(t) { resize(); }

  static Tensor like_desc(const plx_tensor_desc& d, DLDataType float_dtype) {
    std::vector<int64_t> s(d.dims, d.dims + d.ndim);
    return Tensor(s, d.dtype.code == kDLFloat ? float_dtype : d.dtype);
  }
  static Tensor ints(std::vector<int64_t> s, std::vector<int32_t> values) {
    Tensor t(std::move(s), plx_dtype_i32());
    t.i32 = std::move(values);
    return t;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  bool is_float() const { return dtype.code == kDLFloat; }
  void resize() {
    const auto n = static_cast<std::size_t>(numel());
    if (plx_dtype_equal(dtype, plx_dtype_f64())) f64.assign(n, 0.0);
    if (plx_dtype_equal(dtype, plx_dtype_f32())) f32.assign(n, 0.0f);
    if (plx_dtype_equal(dtype, plx_dtype_i32())) i32.assign(n, 0);
  }
  double get(std::size_t i) const {
    if (plx_dtype_equal(dtype, plx_dtype_f64())) return f64[i];
    if (plx_dtype_equal(dtype, plx_dtype_f32())) return static_cast<double>(f32[i]);
    return static_cast<double>(i32[i]);
  }
  void set(std::size_t i, double v) {
    if (plx_dtype_equal(dtype, plx_dtype_f64()))
      f64[i] = v;
    else if (plx_dtype_equal(dtype, plx_dtype_f32()))
      f32[i] = static_cast<float>(v);
    else
      i32[i] = static_cast<int32_t>(v);
  }
  std::vector<double> values() const {
    std::vector<double> out(static_cast<std::size_t>(numel()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = get(i);
    return out;
  }
  void fill(double v) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(numel()); ++i) set(i, v);
  }
  // The same values in another float dtype.
  Tensor as(DLDataType t) const {
    Tensor out(shape, t);
    for (std::size_t i = 0; i < static_cast<std::size_t>(numel()); ++i) out.set(i, get(i));
    return out;
  }
  DLTensor view() {
    DLTensor v{};
    v.device = DLDevice{kDLCPU, 0};
    v.ndim = static_cast<int32_t>(shape.size());
    v.dtype = dtype;
    v.shape = shape.data();
    if (null_data)
      v.data = nullptr;
    else if (plx_dtype_equal(dtype, plx_dtype_f64()))
      v.data = f64.data();
    else if (plx_dtype_equal(dtype, plx_dtype_f32()))
      v.data = f32.data();
    else
      v.data = i32.data();
    return v;
  }
};

inline std::vector<DLTensor> views(std::vector<Tensor>& ts) {
  std::vector<DLTensor> out;
  for (Tensor& t : ts) out.push_back(t.view());
  return out;
}

inline std::vector<plx_tensor_desc> descs(const std::vector<Tensor>& ts) {
  std::vector<plx_tensor_desc> out;
  for (const Tensor& t : ts) {
    plx_tensor_desc d{};
    d.ndim = static_cast<uint32_t>(t.shape.size());
    d.dtype = t.dtype;
    for (std::size_t i = 0; i < t.shape.size(); ++i) d.dims[i] = t.shape[i];
    out.push_back(d);
  }
  return out;
}

// The arguments of one forward call over these views (host or device tensors alike); `flags`:
// PLX_FORWARD_TRAINING or 0. The views must outlive the call.
inline plx_forward_args forward_args(std::vector<DLTensor>& in, std::vector<DLTensor>& out,
                                     std::vector<DLTensor>& par, uint32_t flags) {
  plx_forward_args args{};
  args.struct_size = sizeof(args);
  args.flags = flags;
  args.num_inputs = static_cast<uint32_t>(in.size());
  args.inputs = in.data();
  args.num_outputs = static_cast<uint32_t>(out.size());
  args.outputs = out.data();
  args.num_params = static_cast<uint32_t>(par.size());
  args.params = par.data();
  return args;
}

// The arguments of one backward call over these views; loss_scale is the call's
// d objective / d this microbatch's loss (ABI 1.4; 0 reads as 1), `flags` e.g.
// PLX_BACKWARD_SKIP_WEIGHT_GRADS. The views must outlive the call.
inline plx_backward_args backward_args(std::vector<DLTensor>& go, std::vector<DLTensor>& gi,
                                       std::vector<DLTensor>& par, std::vector<DLTensor>& pg,
                                       double loss_scale = 0.0, uint32_t flags = 0) {
  plx_backward_args args{};
  args.struct_size = sizeof(args);
  args.flags = flags;
  args.num_outputs = static_cast<uint32_t>(go.size());
  args.grad_outputs = go.data();
  args.num_inputs = static_cast<uint32_t>(gi.size());
  args.grad_inputs = gi.data();
  args.num_params = static_cast<uint32_t>(par.size());
  args.params = par.data();
  args.param_grads = pg.data();
  args.loss_scale = loss_scale;
  return args;
}

// Tensors for every parameter of a layer, with its spec's shape, in `dtype`, filled with
// normal(0, 1) * scale from `rng` (not the host's initialization: gradient checks want
// non-trivial values everywhere, e.g. norm weights far from 1).
inline std::vector<Tensor> random_params(const plexus::LayerInstance& layer, DLDataType dtype,
                                         std::mt19937_64& rng, double scale = 0.5) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<Tensor> out;
  for (uint32_t i = 0; i < layer.info().num_params; ++i) {
    const plx_param_spec spec = layer.param(i);
    Tensor t(std::vector<int64_t>(spec.desc.dims, spec.desc.dims + spec.desc.ndim), dtype);
    for (std::size_t k = 0; k < static_cast<std::size_t>(t.numel()); ++k) t.set(k, normal(rng) * scale);
    out.push_back(std::move(t));
  }
  return out;
}

inline Tensor random_tensor(std::vector<int64_t> shape, DLDataType dtype, std::mt19937_64& rng,
                            double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensor t(std::move(shape), dtype);
  for (std::size_t k = 0; k < static_cast<std::size_t>(t.numel()); ++k) t.set(k, normal(rng) * scale);
  return t;
}

// One run of a layer: forward (training) and, on demand, backward, over owned host tensors; every
// stage of the layer in order (backward in reverse).
struct Run {
  const plexus::LayerInstance& layer;
  std::vector<Tensor> inputs;
  std::vector<Tensor> params;
  DLDataType float_dtype = plx_dtype_f64();
  std::unique_ptr<plexus::LayerInstance::State> state;
  std::vector<Tensor> outputs;

  Run(const plexus::LayerInstance& l, std::vector<Tensor> in, std::vector<Tensor> p, DLDataType dt)
      : layer(l), inputs(std::move(in)), params(std::move(p)), float_dtype(dt) {}

  // Allocates the outputs from output_desc (float outputs in this run's dtype) and runs forward.
  std::vector<Tensor>& forward(bool training = true) {
    outputs.clear();
    for (const plx_tensor_desc& d : layer.output_desc(descs(inputs)))
      outputs.push_back(Tensor::like_desc(d, float_dtype));
    state = layer.create_state(0);
    std::vector<DLTensor> in = views(inputs), out = views(outputs), par = views(params);
    const plx_forward_args args = forward_args(in, out, par, training ? PLX_FORWARD_TRAINING : 0u);
    for (uint32_t stage = 0; stage < layer.info().num_stages; ++stage) layer.forward(*state, stage, args);
    return outputs;
  }

  // Runs backward on the state of the last forward, every stage in reverse. grad_inputs are given
  // (null_data ones are "not needed"), param_grads accumulate; loss_scale is the call's
  // d objective / d this microbatch's loss (ABI 1.4; 0 reads as 1).
  void backward(std::vector<Tensor>& grad_outputs, std::vector<Tensor>& grad_inputs,
                std::vector<Tensor>& param_grads, double loss_scale = 0.0) {
    std::vector<DLTensor> go = views(grad_outputs), gi = views(grad_inputs), par = views(params),
                          pg = views(param_grads);
    const plx_backward_args args = backward_args(go, gi, par, pg, loss_scale);
    for (uint32_t stage = layer.info().num_stages; stage-- > 0;) layer.backward(*state, stage, args);
  }
};

// Case-insensitive substring test for error messages.
inline bool mentions(std::string_view text, std::string_view needle) {
  const auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  return std::search(text.begin(), text.end(), needle.begin(), needle.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != text.end();
}

// Runs `body`, which must throw; returns the message (empty, with a test failure, if it did not).
inline std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    BOOST_TEST_MESSAGE("refused as expected: " << e.what());
    return e.what();
  }
  BOOST_ERROR("expected an error, but the call succeeded");
  return {};
}

}  // namespace tt

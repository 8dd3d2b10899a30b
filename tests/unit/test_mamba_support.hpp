// Shared by the tests of the mamba plugin (tests/unit/test_mamba_*.cpp,
// tests/integration/test_mamba_parity.cpp): loads the real built plugin, builds the model section
// and the component's options, creates mamba.mixer and fills its parameters with values in the
// ranges training sees. Host tensors and runs are the transformer tests' (tt::Tensor, tt::Run).
#pragma once

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_transformer_support.hpp"

namespace mamba_test {

namespace fs = std::filesystem;
using tt::Tensor;

// One host for the whole test program with the mamba plugin loaded; unloaded at exit.
inline plexus::PluginHost& host() {
  static plexus::PluginHost instance;
  static const bool loaded = [] {
    tt::load_built_plugin(instance, "mamba");
    return true;
  }();
  (void)loaded;
  return instance;
}

// A layer's sizes: the model section's keys the layer reads and its own options (only those set
// are written, so the layer's defaults apply to the rest).
struct Config {
  int64_t d_model = 16;
  std::string normalization = "RMSNorm";
  double layernorm_epsilon = 1e-5;
  double init_method_std = 0.02;
  uint32_t num_layers = 2;
  uint32_t residual_layers = 0;  // the create args' (ABI 1.6); 0 as from a host before it
  boost::json::object options{
      {"mamba_state_dim", 16}, {"mamba_head_dim", 8}, {"mamba_num_groups", 2}, {"chunk_size", 16}};

  // The derived sizes, as the layer's README defines them.
  int64_t head_dim() const { return options.at("mamba_head_dim").as_int64(); }
  int64_t state_dim() const { return options.at("mamba_state_dim").as_int64(); }
  int64_t groups() const { return options.at("mamba_num_groups").as_int64(); }
  int64_t chunk() const { return options.at("chunk_size").as_int64(); }
  int64_t heads() const {
    if (const auto* h = options.if_contains("mamba_num_heads")) return h->as_int64();
    const auto* e = options.if_contains("expand");
    return (e != nullptr ? e->as_int64() : 2) * d_model / head_dim();
  }
  int64_t d_inner() const { return heads() * head_dim(); }
  int64_t conv_width() const {
    const auto* w = options.if_contains("d_conv");
    return w != nullptr ? w->as_int64() : 4;
  }
  int64_t conv_dim() const { return d_inner() + 2 * groups() * state_dim(); }
  int64_t in_proj_rows() const { return 2 * d_inner() + 2 * groups() * state_dim() + heads(); }

  boost::json::object model() const {
    boost::json::object m;
    m["hidden_size"] = d_model;
    m["normalization"] = normalization;
    m["layernorm_epsilon"] = layernorm_epsilon;
    m["init_method_std"] = init_method_std;
    return m;
  }
};

// mamba.mixer with the config nodes it was created from.
struct Layer : tt::ComponentLayer {
  explicit Layer(const Config& c, DLDevice device = DLDevice{kDLCPU, 0})
      : ComponentLayer(host().get(PLX_KIND_LAYER, "mamba.mixer"), c.options, "model.mamba.options", c.model(), c.num_layers,
                       device, c.residual_layers) {}
};

using tt::param_index;

// How the dt values of a test draw are placed.
enum class Dt {
  training,       // dt_bias = softplus^-1(dt), dt log-uniform in [0.001, 0.1]: Megatron's range
  both_branches,  // as training, but dt_bias = 20 for the even heads: there dt_raw + dt_bias falls on
                  // both sides of softplus's threshold 20 (dt ~ 20 forgets the state within a token)
};

// Parameters in the ranges training sees, drawn from `rng` (not the host's initialization: norm
// weights, D and the biases away from their initial constants, so every gradient path counts):
// in_proj and out_proj N(0, 1 / fan_in), so the in_proj output is O(1); conv weight and bias
// U(+-0.5); A_log = log U(1, 16); D and the norm weights 1 + N(0, 0.2 .. 0.3).
inline std::vector<Tensor> random_params(const plexus::LayerInstance& layer, const Config& c,
                                         DLDataType dtype, std::mt19937_64& rng, Dt dt = Dt::training) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<Tensor> out;
  for (uint32_t i = 0; i < layer.info().num_params; ++i) {
    const plx_param_spec spec = layer.param(i);
    const std::string name = spec.name;
    Tensor t(std::vector<int64_t>(spec.desc.dims, spec.desc.dims + spec.desc.ndim), dtype);
    for (std::size_t k = 0; k < static_cast<std::size_t>(t.numel()); ++k) {
      double v = 0;
      if (name == "norm.weight" || name == "mixer.norm.weight")
        v = 1 + 0.2 * normal(rng);
      else if (name == "norm.bias")
        v = 0.2 * normal(rng);
      else if (name == "mixer.in_proj.weight")
        v = normal(rng) / std::sqrt(static_cast<double>(c.d_model));
      else if (name == "mixer.out_proj.weight")
        v = normal(rng) / std::sqrt(static_cast<double>(c.d_inner()));
      else if (name == "mixer.conv1d.weight" || name == "mixer.conv1d.bias")
        v = uniform(rng) - 0.5;
      else if (name == "mixer.A_log")
        v = std::log(1 + 15 * uniform(rng));
      else if (name == "mixer.D")
        v = 1 + 0.3 * normal(rng);
      else if (name == "mixer.dt_bias" && dt == Dt::both_branches && k % 2 == 0)
        v = 20;
      else if (name == "mixer.dt_bias") {
        const double d = std::exp(std::log(0.001) + uniform(rng) * (std::log(0.1) - std::log(0.001)));
        v = d + std::log(-std::expm1(-d));
      } else
        BOOST_FAIL("no test distribution for parameter " << name);
      t.set(k, v);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace mamba_test

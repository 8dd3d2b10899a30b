// What the GPU tests of "mhc" backends share (tests/gpu/test_mhc_*_cuda.cpp): a case's inputs
// drawn as the parity tests draw them, its outputs (written ones start as NaN so a missed element
// shows), host/device copies, the eight calls of a case through plexus::MhcBackend, and the
// error measures. Float32 on the host; a test converts for other dtypes itself.
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mhc_case.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/core/mhc_backend.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/mhc.h"

namespace plexus::test::mhc_gpu {

inline const DLDevice kCpu{kDLCPU, 0};
inline const DLDevice kGpu{kDLCUDA, 0};

// ---- the backend under test ----

// The build's plugin library of backend `name` (libplexus_<name>.so).
inline std::string plugin_path(const std::string& name) {
  return std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins/libplexus_" + name + ".so";
}

// Backend `name`'s component, its plugin loaded once per process.
inline const plexus::Component& component(const std::string& name) {
  static plexus::PluginHost host;
  static std::map<std::string, bool> loaded;
  if (!loaded[name]) {
    host.load(plugin_path(name));
    loaded[name] = true;
  }
  return host.get(PLX_KIND_FUSION_BACKEND, name);
}

// An instance of backend `name` on one device, with empty options.
class Backend {
 public:
  Backend(const std::string& name, DLDevice device) : backend_(component(name), device, config_.get()) {}
  const plexus::MhcBackend& operator*() const { return backend_; }
  const plexus::MhcBackend* operator->() const { return &backend_; }

 private:
  plexus::ConfigHandle config_{boost::json::object{}, "mhc.options"};
  plexus::MhcBackend backend_;
};

using Shape = std::vector<int64_t>;
using Tensors = std::map<std::string, plexus::Tensor>;
using Logits = plexus::test::MhcLogits;
using Case = plexus::test::MhcCase;

// ---- tensors ----

inline plexus::Tensor host_tensor(const Shape& shape, float value) {
  plexus::Tensor t(shape, plx_dtype_f32(), kCpu);
  std::fill_n(t.data<float>(), t.numel(), value);
  return t;
}

inline plexus::Tensor random(const Shape& shape, std::mt19937_64& rng, double scale = 1.0,
                             double offset = 0.0) {
  plexus::Tensor t(shape, plx_dtype_f32(), kCpu);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(offset + scale * normal(rng));
  return t;
}

// The inputs of every primitive, including the upstream gradients g_* (as the parity tests draw
// them), and the starting values "start.<output>" of the accumulated outputs.
inline Tensors make_inputs(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t n = c.n, C = c.C, T = c.T, W = c.W();
  Tensors in;
  in["x"] = random({T, n, C}, rng);
  in["phi"] = random({n * C, W}, rng, 1.0 / std::sqrt(static_cast<double>(n * C)));
  in["g_p"] = random({T, W}, rng);
  in["g_r"] = random({T}, rng);

  in["p"] = random({T, W}, rng);
  in["r"] = random({T}, rng, 0.3, 1.0);
  in["alpha"] = host_tensor({3}, 0.0f);
  const float alpha[3] = {0.8f, -0.6f, 1.3f};
  std::copy_n(alpha, 3, in["alpha"].data<float>());
  in["b"] = random({W}, rng, 0.5);
  float* b = in["b"].data<float>();
  float* p = in["p"].data<float>();
  std::normal_distribution<double> noise(0.0, 100.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = 2 * n + i * n + j;
      switch (c.logits) {
        case Logits::ordinary:
          break;
        case Logits::large:
          b[k] += static_cast<float>((j == (i + 1) % n ? 1000.0 : -1000.0) + noise(rng));
          break;
        case Logits::tiny_sums:
          b[k] -= j == 0 ? 25.0f : 0.0f;
          break;
        case Logits::spread:
          b[k] *= 4.0f;
          break;
        case Logits::column_dominated:
          b[k] = j == 0 ? 4.0f : 0.2f * b[k];
          for (int64_t t = 0; t < T; ++t) p[t * W + k] *= 0.2f;
          break;
      }
    }
  in["g_h_pre"] = random({T, n}, rng);
  in["g_h_post"] = random({T, n}, rng);
  in["g_h_res"] = random({T, n, n}, rng);

  in["h_pre"] = random({T, n}, rng, 0.5, 0.5);
  in["g_u"] = random({T, C}, rng);

  in["h_res"] = random({T, n, n}, rng, 0.5);
  in["h_post"] = random({T, n}, rng, 0.5, 1.0);
  in["f"] = random({T, C}, rng);
  in["bias"] = random({C}, rng, 0.3);
  in["g_y"] = random({T, n, C}, rng);

  in["start.proj_rms.dx"] = random({T, n, C}, rng, 0.5);
  in["start.dphi"] = random({n * C, W}, rng, 0.5);
  in["start.dalpha"] = random({3}, rng, 0.5);
  in["start.db"] = random({W}, rng, 0.5);
  in["start.aggregate.dx"] = random({T, n, C}, rng, 0.5);
  in["start.post_res.dx"] = random({T, n, C}, rng, 0.5);
  in["start.dbias"] = random({C}, rng, 0.5);
  return in;
}

// Every output, and whether the family accumulates into it (+=) or writes it.
struct Output {
  Shape shape;
  bool accumulated;
};
inline std::map<std::string, Output> outputs(const Case& c) {
  const int64_t n = c.n, C = c.C, T = c.T, W = c.W();
  return {{"out.p", {{T, W}, false}},
          {"out.r", {{T}, false}},
          {"proj_rms.dx", {{T, n, C}, true}},
          {"dphi", {{n * C, W}, true}},
          {"out.h_pre", {{T, n}, false}},
          {"out.h_post", {{T, n}, false}},
          {"out.h_res", {{T, n, n}, false}},
          {"dp", {{T, W}, false}},
          {"dr", {{T}, false}},
          {"dalpha", {{3}, true}},
          {"db", {{W}, true}},
          {"u", {{T, C}, false}},
          {"aggregate.dx", {{T, n, C}, true}},
          {"dh_pre", {{T, n}, false}},
          {"y", {{T, n, C}, false}},
          {"post_res.dx", {{T, n, C}, true}},
          {"dh_res", {{T, n, n}, false}},
          {"dh_post", {{T, n}, false}},
          {"df", {{T, C}, false}},
          {"dbias", {{C}, true}}};
}

inline bool is_forward(const std::string& name) {
  return name.rfind("out.", 0) == 0 || name == "u" || name == "y";
}

// Written outputs start as NaN (an element the kernels miss stays NaN); accumulated ones from
// in["start.<name>"] when `in` has it, else from zero. Float32 on the host.
inline Tensors fresh_outputs(const Case& c, const Tensors* in = nullptr) {
  Tensors out;
  for (const auto& [name, o] : outputs(c)) {
    if (!o.accumulated) {
      out[name] = host_tensor(o.shape, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const auto start = in != nullptr ? in->find("start." + name) : Tensors::const_iterator{};
    out[name] = in != nullptr && start != in->end() ? start->second.to(kCpu) : host_tensor(o.shape, 0.0f);
  }
  return out;
}

inline Tensors to_device(const Tensors& tensors, DLDevice device) {
  Tensors moved;
  for (const auto& [name, t] : tensors) moved[name] = t.to(device);
  return moved;
}

// DLTensor views of a set of tensors, alive as long as this object (the calls take pointers).
class Views {
 public:
  explicit Views(const Tensors& tensors) {
    for (const auto& [name, t] : tensors) views_[name] = t.view();
  }
  DLTensor* operator[](const std::string& name) {
    const auto it = views_.find(name);
    BOOST_TEST_REQUIRE((it != views_.end()), "no tensor " << name);
    return &it->second;
  }

 private:
  std::map<std::string, DLTensor> views_;
};

// The eight calls of one case, forward then backward of each primitive, on whatever device the
// tensors are on (inputs `in`, outputs `out`).
inline void run_all(const plexus::MhcBackend& be, const Case& c, const Tensors& in, const Tensors& out,
                    plx_stream stream = nullptr) {
  const plx_mhc_problem pb = c.problem();
  Views i(in), o(out);
  DLTensor* bias = c.bias ? i["bias"] : nullptr;  // NULL: F has no output bias

  be.proj_rms_forward(pb,
                      {.struct_size = sizeof(plx_mhc_proj_rms_forward_args),
                       .reserved = 0,
                       .x = i["x"],
                       .phi = i["phi"],
                       .p = o["out.p"],
                       .r = o["out.r"]},
                      stream);
  be.proj_rms_backward(pb,
                       {.struct_size = sizeof(plx_mhc_proj_rms_backward_args),
                        .reserved = 0,
                        .x = i["x"],
                        .phi = i["phi"],
                        .dp = i["g_p"],
                        .dr = i["g_r"],
                        .dx = o["proj_rms.dx"],
                        .dphi = o["dphi"]},
                       stream);
  be.mappings_forward(pb,
                      {.struct_size = sizeof(plx_mhc_mappings_forward_args),
                       .reserved = 0,
                       .p = i["p"],
                       .r = i["r"],
                       .alpha = i["alpha"],
                       .b = i["b"],
                       .h_pre = o["out.h_pre"],
                       .h_post = o["out.h_post"],
                       .h_res = o["out.h_res"]},
                      stream);
  be.mappings_backward(pb,
                       {.struct_size = sizeof(plx_mhc_mappings_backward_args),
                        .reserved = 0,
                        .p = i["p"],
                        .r = i["r"],
                        .alpha = i["alpha"],
                        .b = i["b"],
                        .dh_pre = i["g_h_pre"],
                        .dh_post = i["g_h_post"],
                        .dh_res = i["g_h_res"],
                        .dp = o["dp"],
                        .dr = o["dr"],
                        .dalpha = o["dalpha"],
                        .db = o["db"]},
                       stream);
  be.aggregate_forward(pb,
                       {.struct_size = sizeof(plx_mhc_aggregate_forward_args),
                        .reserved = 0,
                        .x = i["x"],
                        .h_pre = i["h_pre"],
                        .u = o["u"]},
                       stream);
  be.aggregate_backward(pb,
                        {.struct_size = sizeof(plx_mhc_aggregate_backward_args),
                         .reserved = 0,
                         .x = i["x"],
                         .h_pre = i["h_pre"],
                         .du = i["g_u"],
                         .dx = o["aggregate.dx"],
                         .dh_pre = o["dh_pre"]},
                        stream);
  be.post_res_forward(pb,
                      {.struct_size = sizeof(plx_mhc_post_res_forward_args),
                       .reserved = 0,
                       .x = i["x"],
                       .h_res = i["h_res"],
                       .h_post = i["h_post"],
                       .f = i["f"],
                       .bias = bias,
                       .y = o["y"]},
                      stream);
  be.post_res_backward(pb,
                       {.struct_size = sizeof(plx_mhc_post_res_backward_args),
                        .reserved = 0,
                        .x = i["x"],
                        .h_res = i["h_res"],
                        .h_post = i["h_post"],
                        .f = i["f"],
                        .bias = bias,
                        .dy = i["g_y"],
                        .dx = o["post_res.dx"],
                        .dh_res = o["dh_res"],
                        .dh_post = o["dh_post"],
                        .df = o["df"],
                        .dbias = o["dbias"]},
                       stream);
}

// max |ours - ref| / max(max |ref|, 1e-30); every element of ours must be finite.
inline double scaled_error(const plexus::Tensor& ours, const plexus::Tensor& ref, const std::string& key) {
  BOOST_TEST_REQUIRE(ours.numel() == ref.numel(), key);
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double a = ours.data<float>()[i], b = ref.data<float>()[i];
    BOOST_TEST_REQUIRE(std::isfinite(a), key << "[" << i << "] is not finite on the GPU");
    diff = std::max(diff, std::abs(a - b));
    scale = std::max(scale, std::abs(b));
  }
  return diff / scale;
}

inline bool same_bits(const plexus::Tensor& a, const plexus::Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

}  // namespace plexus::test::mhc_gpu

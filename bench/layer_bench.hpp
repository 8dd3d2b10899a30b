// What the layer micro-benchmarks (bench_layers, bench_mamba, bench_moe) share: their "--name
// value" options, float32/float64 tensors in host memory, parameters initialized as the host
// initializes them, the layer created through the real plugin and the host's LayerInstance from
// model and options JSON, and the timed training forward (every stage) and the backward that
// follows (input and every parameter gradient); for bench_mamba and bench_moe also the options
// they have beside their layer's and their report against the GEMM peak. Each benchmark keeps
// its layer's options, its shapes and the line that says what it measures.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <boost/json.hpp>

#include "gemm_peak.hpp"
#include "plexus/core/components.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/plexus.h"
#include "plexus_kernels/threading.hpp"

namespace plexus::bench {

// A "--name value" option and the field its value sets.
struct Option {
  const char* name;
  std::variant<int64_t*, int*, std::string*> field;
};

// Sets the fields of argv's "--name value" pairs (a last name without a value is passed over).
// False, after saying so on stderr, at the first name that is not in `table`.
inline bool parse_options(int argc, char** argv, const std::vector<Option>& table, const char* program) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i], value = argv[i + 1];
    const auto option =
        std::find_if(table.begin(), table.end(), [&](const Option& o) { return name == o.name; });
    if (option == table.end()) {
      std::fprintf(stderr, "%s: unknown option %s (see the comment at the top of bench/%s.cpp)\n", program,
                   name.c_str(), program);
      return false;
    }
    std::visit(
        [&value](auto* field) {
          using T = std::remove_pointer_t<decltype(field)>;
          if constexpr (std::is_same_v<T, std::string>)
            *field = value;
          else if constexpr (std::is_same_v<T, int>)
            *field = std::stoi(value);
          else
            *field = std::stoll(value);
        },
        option->field);
  }
  return true;
}

// A host-memory tensor of float32 or float64 values, all zero at the start.
class Buffer {
 public:
  Buffer(std::vector<int64_t> shape, DLDataType dtype) : shape_(std::move(shape)), dtype_(dtype) {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    if (dtype_.bits == 64)
      f64_.assign(static_cast<std::size_t>(n), 0.0);
    else
      f32_.assign(static_cast<std::size_t>(n), 0.0f);
  }
  std::size_t size() const { return f64_.empty() ? f32_.size() : f64_.size(); }
  void set(std::size_t i, double v) {
    if (f64_.empty())
      f32_[i] = static_cast<float>(v);
    else
      f64_[i] = v;
  }
  DLTensor view() {
    DLTensor v{};
    v.data = dtype_.bits == 64 ? static_cast<void*>(f64_.data()) : static_cast<void*>(f32_.data());
    v.device = DLDevice{kDLCPU, 0};
    v.ndim = static_cast<int32_t>(shape_.size());
    v.dtype = dtype_;
    v.shape = shape_.data();
    return v;
  }

 private:
  std::vector<double> f64_;
  std::vector<float> f32_;
  std::vector<int64_t> shape_;
  DLDataType dtype_{};
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The benchmarks' --dtype: "f64", or float32 for anything else.
inline DLDataType dtype_named(const std::string& name) {
  return name == "f64" ? plx_dtype_f64() : plx_dtype_f32();
}

// Fills a parameter as the host would: its spec's initialization, or the layer's own.
inline void initialize(const LayerInstance& layer, uint32_t index, Buffer& value, std::mt19937_64& rng) {
  const plx_param_spec p = layer.param(index);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (std::size_t i = 0; i < value.size(); ++i) {
    switch (p.init) {
      case PLX_INIT_ONES:
        value.set(i, 1.0);
        break;
      case PLX_INIT_NORMAL:
        value.set(i, p.init_a * normal(rng));
        break;
      case PLX_INIT_UNIFORM:
        value.set(i, p.init_a + (p.init_b - p.init_a) * uniform(rng));
        break;
      default:
        value.set(i, 0.0);
    }
  }
  if (p.init == PLX_INIT_CUSTOM) {
    DLTensor v = value.view();
    layer.init_param(index, v, rng());
  }
}

// As plexus-train runs by default: subnormal floats count as zero (run.flush_denormals; set
// before OpenMP's threads exist, which inherit it) and the heap keeps freed memory. Then the
// plugin, and this program's own products (the GEMM peak) single-threaded in BLAS, as the
// plugin's are.
inline void load_as_plexus_train(PluginHost& host, const std::string& plugin) {
  device::flush_denormals();
  device::retain_freed_host_memory();
  host.load(plugin);
  kernels::use_single_threaded_blas();
}

// Milliseconds of each timed iteration.
struct Timings {
  std::vector<double> forward, backward, total;
};

// One layer of a 4-layer model on the CPU, created from its model and options config, with its
// parameters (initialized), their gradients, an input and an output gradient of N(0, 1) values.
class LayerBench {
 public:
  LayerBench(PluginHost& host, const std::string& name, boost::json::object model,
             boost::json::object options, DLDataType dtype, std::vector<int64_t> hidden_shape)
      : model_(std::move(model), "model"),
        options_(std::move(options), "options"),
        layer_(host.get(PLX_KIND_LAYER, name), create_args(model_, options_)),
        x_(hidden_shape, dtype),
        y_(hidden_shape, dtype),
        dy_(hidden_shape, dtype),
        dx_(hidden_shape, dtype),
        input_{static_cast<uint32_t>(hidden_shape.size()), dtype, {}} {
    std::copy(hidden_shape.begin(), hidden_shape.end(), input_.dims);
    std::mt19937_64 rng(1);
    for (uint32_t i = 0; i < layer_.info().num_params; ++i) {
      const plx_param_spec p = layer_.param(i);
      const std::vector<int64_t> shape(p.desc.dims, p.desc.dims + p.desc.ndim);
      params_.emplace_back(shape, dtype);
      initialize(layer_, i, params_.back(), rng);
      grads_.emplace_back(shape, dtype);
    }
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::size_t i = 0; i < x_.size(); ++i) x_.set(i, normal(rng));
    for (std::size_t i = 0; i < dy_.size(); ++i) dy_.set(i, normal(rng));
  }

  // The layer's matrix products for this input, when it can tell.
  std::optional<LayerInstance::Flops> flops() const { return layer_.estimate_flops({input_}); }

  // `iters` timed forward + backward passes after 3 untimed ones (first touches of memory,
  // thread start), each with a fresh state, as a training step has.
  Timings run(int iters) {
    using Clock = std::chrono::steady_clock;
    std::vector<DLTensor> pv, gv;
    for (auto& p : params_) pv.push_back(p.view());
    for (auto& g : grads_) gv.push_back(g.view());
    DLTensor xv = x_.view(), yv = y_.view(), dyv = dy_.view(), dxv = dx_.view();
    // The same arguments every pass. The fields the two structs share by name: one input, one
    // output, the parameters.
    const auto set_common = [&pv](auto& args) {
      args.struct_size = sizeof(args);
      args.num_inputs = 1;
      args.num_outputs = 1;
      args.num_params = static_cast<uint32_t>(pv.size());
      args.params = pv.data();
    };
    plx_forward_args f{};
    set_common(f);
    f.flags = PLX_FORWARD_TRAINING;
    f.inputs = &xv;
    f.outputs = &yv;
    plx_backward_args b{};
    set_common(b);
    b.grad_outputs = &dyv;
    b.grad_inputs = &dxv;
    b.param_grads = gv.data();
    const uint32_t stages = layer_.info().num_stages;
    Timings t;
    for (int it = 0; it < iters + 3; ++it) {
      auto state = layer_.create_state(0);
      const auto t0 = Clock::now();
      for (uint32_t s = 0; s < stages; ++s) layer_.forward(*state, s, f);
      const auto t1 = Clock::now();
      for (uint32_t s = stages; s-- > 0;) layer_.backward(*state, s, b);
      const auto t2 = Clock::now();
      if (it >= 3) {
        t.forward.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        t.backward.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
        t.total.push_back(t.forward.back() + t.backward.back());
      }
    }
    return t;
  }

 private:
  static plx_layer_create_args create_args(ConfigHandle& model, ConfigHandle& options) {
    plx_layer_create_args args{};
    args.struct_size = sizeof(args);
    args.num_layers = 4;
    args.device = DLDevice{kDLCPU, 0};
    args.config = options.get();
    args.model_config = model.get();
    return args;
  }

  // Declared before the layer: the config it was created with lives as long as it does.
  ConfigHandle model_, options_;
  LayerInstance layer_;
  std::vector<Buffer> params_, grads_;
  Buffer x_, y_, dy_, dx_;
  plx_tensor_desc input_;
};

// The options of bench_mamba and bench_moe besides their layer's: element type (f32 or f64),
// timed iterations, runs of the GEMM peak (0: not measured, e.g. under a profiler) and the plugin.
struct RunOptions {
  explicit RunOptions(std::string plugin_file) : plugin(std::move(plugin_file)) {}
  std::string dtype = "f32";
  int iters = 10;
  int peak_reps = 10;
  std::string plugin;

  // Adds these to the layer's options, by their command-line names.
  void add_names(std::vector<Option>& names) {
    names.insert(
        names.end(),
        {{"--dtype", &dtype}, {"--iters", &iters}, {"--peak-reps", &peak_reps}, {"--plugin", &plugin}});
  }
};

// What bench_mamba and bench_moe run and print: the layer timed (LayerBench::run), then its
// median forward, backward and forward + backward, the fastest forward + backward, and its matrix
// products as GFLOP/s and as a fraction of the GEMM peak of this process's threads (measured
// here, best of `peak_reps`).
inline void bench_against_peak(PluginHost& host, const char* name, boost::json::object model,
                               boost::json::object options, const RunOptions& run,
                               std::vector<int64_t> hidden_shape) {
  const int iters = run.iters, peak_reps = run.peak_reps;
  const std::string& dtype = run.dtype;
  LayerBench b(host, name, std::move(model), std::move(options), dtype_named(dtype), std::move(hidden_shape));
  const Timings t = b.run(iters);
  const auto flops = b.flops();
  const bool f64 = dtype == "f64";
  const double fm = median(t.forward), bm = median(t.backward), tm = median(t.total);
  const double peak = peak_reps < 1 ? 0.0 : f64 ? gemm_peak<double>(peak_reps) : gemm_peak<float>(peak_reps);
  std::printf("%s fwd %8.2f ms  bwd %8.2f ms  fwd+bwd median %8.2f ms  min %8.2f ms\n", name, fm, bm, tm,
              *std::min_element(t.total.begin(), t.total.end()));
  if (flops && peak > 0) {
    const double rate = (flops->forward + flops->backward) / (tm * 1e6);
    std::printf(
        "matrix products %.2f + %.2f GFLOP: %.1f GFLOP/s, %.0f%% of the %s peak here (%.1f GFLOP/s)\n",
        flops->forward / 1e9, flops->backward / 1e9, rate, 100 * rate / peak, f64 ? "DGEMM" : "SGEMM", peak);
  }
}

}  // namespace plexus::bench

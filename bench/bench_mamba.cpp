// Micro-benchmark of mamba.mixer through the real plugin and the host's LayerInstance: median
// time of a training forward and of the backward that follows (input and every parameter
// gradient), the fastest forward + backward, the layer's GFLOP/s (its matrix products as run,
// from estimate_flops) and that as a fraction of the SGEMM peak of the same threads, measured in
// the same process the way the plugin runs its products (plexus_kernels::gemm_parallel: one
// single-threaded OpenBLAS call per OpenMP thread), best of 10 at 2048^3.
//
//   bench_mamba [--batch 4] [--seq 1024] [--d-model 256] [--state-dim 128] [--head-dim 64]
//               [--groups 8] [--expand 2] [--chunk 128] [--dtype f32|f64] [--iters 10]
//               [--plugin FILE]  (another build of libplexus_mamba.so, to compare two builds)
//               [--peak-reps 10] (0: no SGEMM peak measurement, e.g. under a profiler)
//
// Parameters start as the host initializes them (Megatron's initialization, mamba.mixer's own
// initializers for A_log and dt_bias). Built on demand: cmake --build build --target bench_mamba
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "plexus/core/components.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/plexus.h"
#include "gemm_peak.hpp"
#include "plexus_kernels/threading.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t batch = 4, seq = 1024, d_model = 256, state_dim = 128, head_dim = 64, groups = 8, expand = 2,
          chunk = 128;
  std::string dtype = "f32";
  int iters = 10;
  int peak_reps = 10;
  std::string plugin = std::string(PLEXUS_PLUGIN_DIR) + "/libplexus_mamba.so";
};

struct Buffer {
  std::vector<double> f64;
  std::vector<float> f32;
  std::vector<int64_t> shape;
  DLDataType dtype{};
  Buffer(std::vector<int64_t> s, DLDataType t) : shape(std::move(s)), dtype(t) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (t.bits == 64)
      f64.assign(static_cast<std::size_t>(n), 0.0);
    else
      f32.assign(static_cast<std::size_t>(n), 0.0f);
  }
  std::size_t size() const { return f64.empty() ? f32.size() : f64.size(); }
  void set(std::size_t i, double v) {
    if (f64.empty())
      f32[i] = static_cast<float>(v);
    else
      f64[i] = v;
  }
  DLTensor view() {
    DLTensor v{};
    v.data = dtype.bits == 64 ? static_cast<void*>(f64.data()) : static_cast<void*>(f32.data());
    v.device = DLDevice{kDLCPU, 0};
    v.ndim = static_cast<int32_t>(shape.size());
    v.dtype = dtype;
    v.shape = shape.data();
    return v;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Fills a parameter as the host would: its spec's initialization, or the layer's own.
void initialize(const plexus::LayerInstance& layer, uint32_t index, Buffer& value, std::mt19937_64& rng) {
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

void bench(plexus::PluginHost& host, const Options& o) {
  boost::json::object model{{"hidden_size", o.d_model},
                            {"normalization", "RMSNorm"},
                            {"layernorm_epsilon", 1e-5},
                            {"init_method_std", 0.02}};
  boost::json::object options{{"mamba_state_dim", o.state_dim},
                              {"mamba_head_dim", o.head_dim},
                              {"mamba_num_groups", o.groups},
                              {"expand", o.expand},
                              {"chunk_size", o.chunk}};
  plexus::ConfigHandle model_node(model, "model"), config(options, "options");
  plx_layer_create_args args{};
  args.struct_size = sizeof(args);
  args.num_layers = 4;
  args.device = DLDevice{kDLCPU, 0};
  args.config = config.get();
  args.model_config = model_node.get();
  const plexus::LayerInstance layer(host.get(PLX_KIND_LAYER, "mamba.mixer"), args);

  const DLDataType dt = o.dtype == "f64" ? plx_dtype_f64() : plx_dtype_f32();
  std::mt19937_64 rng(1);
  std::vector<Buffer> params, grads;
  for (uint32_t i = 0; i < layer.info().num_params; ++i) {
    const plx_param_spec p = layer.param(i);
    const std::vector<int64_t> shape(p.desc.dims, p.desc.dims + p.desc.ndim);
    params.emplace_back(shape, dt);
    initialize(layer, i, params.back(), rng);
    grads.emplace_back(shape, dt);
  }
  const std::vector<int64_t> hidden{o.batch, o.seq, o.d_model};
  Buffer x(hidden, dt), y(hidden, dt), dy(hidden, dt), dx(hidden, dt);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::size_t i = 0; i < x.size(); ++i) x.set(i, normal(rng));
  for (std::size_t i = 0; i < dy.size(); ++i) dy.set(i, normal(rng));
  std::vector<DLTensor> pv, gv;
  for (auto& p : params) pv.push_back(p.view());
  for (auto& g : grads) gv.push_back(g.view());
  DLTensor xv = x.view(), yv = y.view(), dyv = dy.view(), dxv = dx.view();

  std::vector<double> fwd, bwd;
  for (int it = 0; it < o.iters + 3; ++it) {
    auto state = layer.create_state(0);
    plx_forward_args f{};
    f.struct_size = sizeof(f);
    f.flags = PLX_FORWARD_TRAINING;
    f.num_inputs = 1;
    f.inputs = &xv;
    f.num_outputs = 1;
    f.outputs = &yv;
    f.num_params = static_cast<uint32_t>(pv.size());
    f.params = pv.data();
    const auto t0 = Clock::now();
    layer.forward(*state, 0, f);
    const auto t1 = Clock::now();
    plx_backward_args b{};
    b.struct_size = sizeof(b);
    b.num_outputs = 1;
    b.grad_outputs = &dyv;
    b.num_inputs = 1;
    b.grad_inputs = &dxv;
    b.num_params = static_cast<uint32_t>(pv.size());
    b.params = pv.data();
    b.param_grads = gv.data();
    layer.backward(*state, 0, b);
    const auto t2 = Clock::now();
    if (it >= 3) {  // warm-up: first touches of memory, thread start
      fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      bwd.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
  }
  std::vector<double> total;
  for (std::size_t i = 0; i < fwd.size(); ++i) total.push_back(fwd[i] + bwd[i]);
  const double fm = median(fwd), bm = median(bwd), tm = median(total);
  const auto flops = layer.estimate_flops({plx_tensor_desc{3, dt, {o.batch, o.seq, o.d_model}}});
  const double peak = o.peak_reps < 1    ? 0.0
                      : o.dtype == "f64" ? plexus::bench::gemm_peak<double>(o.peak_reps)
                                         : plexus::bench::gemm_peak<float>(o.peak_reps);
  std::printf("mamba.mixer fwd %8.2f ms  bwd %8.2f ms  fwd+bwd median %8.2f ms  min %8.2f ms\n", fm, bm, tm,
              *std::min_element(total.begin(), total.end()));
  if (flops && peak > 0) {
    const double rate = (flops->forward + flops->backward) / (tm * 1e6);
    std::printf(
        "matrix products %.2f + %.2f GFLOP: %.1f GFLOP/s, %.0f%% of the %s peak here (%.1f GFLOP/s)\n",
        flops->forward / 1e9, flops->backward / 1e9, rate, 100 * rate / peak,
        o.dtype == "f64" ? "DGEMM" : "SGEMM", peak);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch")
      o.batch = std::stoll(v);
    else if (k == "--seq")
      o.seq = std::stoll(v);
    else if (k == "--d-model")
      o.d_model = std::stoll(v);
    else if (k == "--state-dim")
      o.state_dim = std::stoll(v);
    else if (k == "--head-dim")
      o.head_dim = std::stoll(v);
    else if (k == "--groups")
      o.groups = std::stoll(v);
    else if (k == "--expand")
      o.expand = std::stoll(v);
    else if (k == "--chunk")
      o.chunk = std::stoll(v);
    else if (k == "--dtype")
      o.dtype = v;
    else if (k == "--iters")
      o.iters = std::stoi(v);
    else if (k == "--peak-reps")
      o.peak_reps = std::stoi(v);
    else if (k == "--plugin")
      o.plugin = v;
    else {
      std::fprintf(stderr,
                   "bench_mamba: unknown option %s (see the comment at the top of bench/bench_mamba.cpp)\n",
                   k.c_str());
      return 2;
    }
  }
  // As plexus-train runs by default: subnormal floats count as zero (run.flush_denormals; set
  // before OpenMP's threads exist, which inherit it) and the heap keeps freed memory.
  plexus::device::flush_denormals();
  plexus::device::retain_freed_host_memory();
  plexus::PluginHost host;
  host.load(o.plugin);
  plexus::kernels::use_single_threaded_blas();  // this program's own products, as the plugin's
  const int64_t d_inner = o.expand * o.d_model;
  std::printf("B=%lld L=%lld d_model=%lld d_inner=%lld H=%lld P=%lld N=%lld G=%lld W=4 Q=%lld %s; %s\n",
              static_cast<long long>(o.batch), static_cast<long long>(o.seq),
              static_cast<long long>(o.d_model), static_cast<long long>(d_inner),
              static_cast<long long>(d_inner / o.head_dim), static_cast<long long>(o.head_dim),
              static_cast<long long>(o.state_dim), static_cast<long long>(o.groups),
              static_cast<long long>(o.chunk), o.dtype.c_str(), plexus::kernels::threading_description());
  bench(host, o);
  return 0;
}

// Micro-benchmark of moe.layer through the real plugin and the host's LayerInstance: median time
// of a training forward (every stage) and of the backward that follows (input and every
// parameter gradient), the fastest forward + backward, the layer's GFLOP/s (its matrix products
// as run, from estimate_flops: the router and each token's k experts) and that as a fraction of
// the SGEMM peak of the same threads, measured in the same process the way the plugin runs its
// products (plexus_kernels::gemm_parallel: one single-threaded OpenBLAS call per OpenMP thread),
// best of 10 at 2048^3. One process, every expert here (ep = 1), dropless, no auxiliary losses:
// the same math as bench/torch_moe.py.
//
//   bench_moe [--batch 4] [--seq 1024] [--hidden 256] [--ffn 1024] [--experts 8] [--topk 2]
//             [--activation gelu|swiglu] [--dtype f32|f64] [--iters 10] [--peak-reps 10]
//             [--plugin FILE]  (another build of libplexus_moe.so, to compare two builds)
//
// Parameters start as the host initializes them (Megatron's: N(0, 0.02), linear_fc2 depth-scaled),
// so the router spreads the tokens over the experts about evenly, as a trained balanced router
// would. Built on demand: cmake --build build --target bench_moe
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "gemm_peak.hpp"
#include "plexus/core/components.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/plexus.h"
#include "plexus_kernels/threading.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t batch = 4, seq = 1024, hidden = 256, ffn = 1024, experts = 8, topk = 2;
  std::string activation = "gelu";
  std::string dtype = "f32";
  int iters = 10;
  int peak_reps = 10;
  std::string plugin = std::string(PLEXUS_PLUGIN_DIR) + "/libplexus_moe.so";
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

void bench(plexus::PluginHost& host, const Options& o) {
  boost::json::object model{{"hidden_size", o.hidden},       {"ffn_hidden_size", o.ffn},
                            {"normalization", "RMSNorm"},    {"layernorm_epsilon", 1e-5},
                            {"init_method_std", 0.02},       {"activation", o.activation}};
  boost::json::object options{{"num_moe_experts", o.experts}, {"moe_router_topk", o.topk}};
  plexus::ConfigHandle model_node(model, "model"), config(options, "options");
  plx_layer_create_args args{};
  args.struct_size = sizeof(args);
  args.num_layers = 4;
  args.device = DLDevice{kDLCPU, 0};
  args.config = config.get();
  args.model_config = model_node.get();
  const plexus::LayerInstance layer(host.get(PLX_KIND_LAYER, "moe.layer"), args);
  const uint32_t stages = layer.info().num_stages;

  const DLDataType dt = o.dtype == "f64" ? plx_dtype_f64() : plx_dtype_f32();
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<Buffer> params, grads;
  for (uint32_t i = 0; i < layer.info().num_params; ++i) {
    const plx_param_spec p = layer.param(i);
    const std::vector<int64_t> shape(p.desc.dims, p.desc.dims + p.desc.ndim);
    params.emplace_back(shape, dt);
    for (std::size_t k = 0; k < params.back().size(); ++k)
      params.back().set(k, p.init == PLX_INIT_ONES ? 1.0 : p.init == PLX_INIT_NORMAL ? p.init_a * normal(rng) : 0.0);
    grads.emplace_back(shape, dt);
  }
  const std::vector<int64_t> hidden{o.batch, o.seq, o.hidden};
  Buffer x(hidden, dt), y(hidden, dt), dy(hidden, dt), dx(hidden, dt);
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
    for (uint32_t s = 0; s < stages; ++s) layer.forward(*state, s, f);
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
    for (uint32_t s = stages; s-- > 0;) layer.backward(*state, s, b);
    const auto t2 = Clock::now();
    if (it >= 3) {  // warm-up: first touches of memory, thread start
      fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      bwd.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
  }
  std::vector<double> total;
  for (std::size_t i = 0; i < fwd.size(); ++i) total.push_back(fwd[i] + bwd[i]);
  const double fm = median(fwd), bm = median(bwd), tm = median(total);
  const auto flops = layer.estimate_flops({plx_tensor_desc{3, dt, {o.batch, o.seq, o.hidden}}});
  const double peak = o.peak_reps < 1    ? 0.0
                      : o.dtype == "f64" ? plexus::bench::gemm_peak<double>(o.peak_reps)
                                         : plexus::bench::gemm_peak<float>(o.peak_reps);
  std::printf("moe.layer fwd %8.2f ms  bwd %8.2f ms  fwd+bwd median %8.2f ms  min %8.2f ms\n", fm, bm, tm,
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
    else if (k == "--hidden")
      o.hidden = std::stoll(v);
    else if (k == "--ffn")
      o.ffn = std::stoll(v);
    else if (k == "--experts")
      o.experts = std::stoll(v);
    else if (k == "--topk")
      o.topk = std::stoll(v);
    else if (k == "--activation")
      o.activation = v;
    else if (k == "--dtype")
      o.dtype = v;
    else if (k == "--iters")
      o.iters = std::stoi(v);
    else if (k == "--peak-reps")
      o.peak_reps = std::stoi(v);
    else if (k == "--plugin")
      o.plugin = v;
    else {
      std::fprintf(stderr, "bench_moe: unknown option %s (see the comment at the top of bench/bench_moe.cpp)\n",
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
  std::printf("T=%lld (B=%lld L=%lld) C=%lld F=%lld E=%lld k=%lld %s %s; %s\n",
              static_cast<long long>(o.batch * o.seq), static_cast<long long>(o.batch),
              static_cast<long long>(o.seq), static_cast<long long>(o.hidden), static_cast<long long>(o.ffn),
              static_cast<long long>(o.experts), static_cast<long long>(o.topk), o.activation.c_str(),
              o.dtype.c_str(), plexus::kernels::threading_description());
  bench(host, o);
  return 0;
}

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
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "layer_bench.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus_kernels/threading.hpp"

namespace {

struct Options : plexus::bench::RunOptions {
  Options() : RunOptions(std::string(PLEXUS_PLUGIN_DIR) + "/libplexus_mamba.so") {}
  int64_t batch = 4, seq = 1024, d_model = 256, state_dim = 128, head_dim = 64, groups = 8, expand = 2,
          chunk = 128;
};

// The command line's name of each option.
std::vector<plexus::bench::Option> option_names(Options& o) {
  std::vector<plexus::bench::Option> names{{"--batch", &o.batch},       {"--seq", &o.seq},
                                           {"--d-model", &o.d_model},   {"--state-dim", &o.state_dim},
                                           {"--head-dim", &o.head_dim}, {"--groups", &o.groups},
                                           {"--expand", &o.expand},     {"--chunk", &o.chunk}};
  o.add_names(names);
  return names;
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
  plexus::bench::bench_against_peak(host, "mamba.mixer", std::move(model), std::move(options), o,
                                    {o.batch, o.seq, o.d_model});
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!plexus::bench::parse_options(argc, argv, option_names(o), "bench_mamba")) return 2;
  plexus::PluginHost host;
  plexus::bench::load_as_plexus_train(host, o.plugin);
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

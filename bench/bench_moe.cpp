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
  Options() : RunOptions(std::string(PLEXUS_PLUGIN_DIR) + "/libplexus_moe.so") {}
  int64_t batch = 4, seq = 1024, hidden = 256, ffn = 1024, experts = 8, topk = 2;
  std::string activation = "gelu";
};

// The command line's name of each option.
std::vector<plexus::bench::Option> option_names(Options& o) {
  std::vector<plexus::bench::Option> names{
      {"--batch", &o.batch},     {"--seq", &o.seq},   {"--hidden", &o.hidden},        {"--ffn", &o.ffn},
      {"--experts", &o.experts}, {"--topk", &o.topk}, {"--activation", &o.activation}};
  o.add_names(names);
  return names;
}

void bench(plexus::PluginHost& host, const Options& o) {
  boost::json::object model{{"hidden_size", o.hidden},       {"ffn_hidden_size", o.ffn},
                            {"normalization", "RMSNorm"},    {"layernorm_epsilon", 1e-5},
                            {"init_method_std", 0.02},       {"activation", o.activation}};
  boost::json::object options{{"num_moe_experts", o.experts}, {"moe_router_topk", o.topk}};
  plexus::bench::bench_against_peak(host, "moe.layer", std::move(model), std::move(options), o,
                                    {o.batch, o.seq, o.hidden});
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!plexus::bench::parse_options(argc, argv, option_names(o), "bench_moe")) return 2;
  plexus::PluginHost host;
  plexus::bench::load_as_plexus_train(host, o.plugin);
  std::printf("T=%lld (B=%lld L=%lld) C=%lld F=%lld E=%lld k=%lld %s %s; %s\n",
              static_cast<long long>(o.batch * o.seq), static_cast<long long>(o.batch),
              static_cast<long long>(o.seq), static_cast<long long>(o.hidden), static_cast<long long>(o.ffn),
              static_cast<long long>(o.experts), static_cast<long long>(o.topk), o.activation.c_str(),
              o.dtype.c_str(), plexus::kernels::threading_description());
  bench(host, o);
  return 0;
}

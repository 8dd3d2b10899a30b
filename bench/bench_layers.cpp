// Micro-benchmark of the transformer layers through the real plugin and the host's LayerInstance:
// median time of a training forward and of the backward that follows (and the fastest forward +
// backward), for attention and MLP. Parameters start as the host initializes them.
//
//   bench_layers [--batch 4] [--seq 256] [--hidden 256] [--heads 4] [--groups 4] [--ffn 1024]
//                     [--activation gelu|swiglu] [--norm RMSNorm|LayerNorm] [--dtype f32|f64] [--iters 20]
//
// Built on demand (not part of `all`): cmake --build build --target bench_layers
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "layer_bench.hpp"
#include "plexus/core/plugin_host.hpp"

namespace {

struct Options {
  int64_t batch = 4, seq = 256, hidden = 256, heads = 4, groups = 4, ffn = 1024;
  std::string activation = "gelu", norm = "RMSNorm", dtype = "f32";
  int iters = 20;
};

// The command line's name of each option.
std::vector<plexus::bench::Option> option_names(Options& o) {
  return {
      {"--batch", &o.batch},   {"--seq", &o.seq},    {"--hidden", &o.hidden},         {"--heads", &o.heads},
      {"--groups", &o.groups}, {"--ffn", &o.ffn},    {"--activation", &o.activation}, {"--norm", &o.norm},
      {"--dtype", &o.dtype},   {"--iters", &o.iters}};
}

void bench(plexus::PluginHost& host, const char* name, const Options& o) {
  boost::json::object m;
  m["vocab_size"] = 1000;
  m["hidden_size"] = o.hidden;
  m["num_layers"] = 4;
  m["num_attention_heads"] = o.heads;
  m["num_query_groups"] = o.groups;
  m["ffn_hidden_size"] = o.ffn;
  m["seq_length"] = o.seq;
  m["normalization"] = o.norm;
  m["layernorm_epsilon"] = 1e-5;
  m["rotary_base"] = 10000.0;
  m["activation"] = o.activation;
  m["init_method_std"] = 0.02;
  m["untie_embeddings_and_output_weights"] = false;
  plexus::bench::LayerBench b(host, name, std::move(m), boost::json::object{},
                              plexus::bench::dtype_named(o.dtype), {o.batch, o.seq, o.hidden});
  const plexus::bench::Timings t = b.run(o.iters);
  const auto flops = b.flops();
  const double fm = plexus::bench::median(t.forward), bm = plexus::bench::median(t.backward);
  std::printf("%-22s fwd %7.2f ms  bwd %7.2f ms  fwd+bwd median %7.2f ms  min %7.2f ms", name, fm, bm,
              fm + bm, *std::min_element(t.total.begin(), t.total.end()));
  if (flops) std::printf("  (%.1f GFLOP/s counted)", (flops->forward + flops->backward) / ((fm + bm) * 1e6));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!plexus::bench::parse_options(argc, argv, option_names(o), "bench_layers")) return 2;
  const std::filesystem::path plugin = std::filesystem::path(PLEXUS_PLUGIN_DIR) / "libplexus_transformer.so";
  plexus::PluginHost host;
  host.load(plugin);
  std::printf("B=%lld S=%lld C=%lld nh=%lld ng=%lld F=%lld %s %s %s\n", static_cast<long long>(o.batch),
              static_cast<long long>(o.seq), static_cast<long long>(o.hidden),
              static_cast<long long>(o.heads), static_cast<long long>(o.groups),
              static_cast<long long>(o.ffn), o.activation.c_str(), o.norm.c_str(), o.dtype.c_str());
  bench(host, "transformer.attention", o);
  bench(host, "transformer.mlp", o);
  return 0;
}

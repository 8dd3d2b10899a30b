// The moe plugin: the MoE sublayer as the layer component moe.layer, on the CPU in float32 and
// float64, every expert on one rank.
#include "moe_layer.hpp"
#include "plexus/cpp/plugin.hpp"
#include "plexus_kernels/threading.hpp"

namespace {

// All of the plugin's parallelism is OpenMP with OpenBLAS single-threaded inside it, as in the
// transformer plugin (plugins/common/kernels/README.md); the OpenMP runtime is pinned in memory so
// that unloading this plugin does not unload it under its own worker threads.
void init(plexus::sdk::Host host) {
  if (!plexus::kernels::init_for_plugin())
    host.warn(
        "could not pin the OpenMP runtime in memory: unloading this plugin may crash its worker threads");
}

}  // namespace

PLEXUS_PLUGIN_WITH_INIT("moe", "1.0.0",
                        "Mixture-of-experts MLP layer for the CPU (float32 and float64), one expert-parallel "
                        "rank: moe.layer",
                        &init, plexus::moe::layer_component())

// The vision plugin: the layers of a vision encoder (Megatron-LM's CLIP ViT patch embedding and
// its MultimodalProjector), on the CPU in float32 and float64.
#include "plexus/cpp/plugin.hpp"
#include "common.hpp"
#include "plexus_kernels/threading.hpp"

namespace {

// All of the plugin's parallelism is OpenMP with OpenBLAS single-threaded inside it, as in the
// transformer plugin (plugins/common/kernels/README.md); the OpenMP runtime is pinned in memory so
// that unloading this plugin does not unload it under its own worker threads.
void init(plexus::sdk::Host host) {
  if (!plexus::kernels::init_for_plugin())
    host.warn(
        "could not pin the OpenMP runtime in memory: unloading this plugin may crash its worker threads");
  if (host.logs(PLX_LOG_DEBUG))
    host.log(PLX_LOG_DEBUG, std::string("threading: ") + plexus::kernels::threading_description());
}

}  // namespace

PLEXUS_PLUGIN_WITH_INIT(
    "vision", "1.0.0", "vision encoder layers for the CPU (float32 and float64): patch_embedding, projection",
    &init, plexus::vision::patch_embedding_component(), plexus::vision::projection_component())

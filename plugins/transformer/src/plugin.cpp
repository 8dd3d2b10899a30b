// The transformer plugin: GPT layers (embedding, attention, MLP, final norm, LM head) for the CPU
// in float32 and float64, and in a build with CUDA for CUDA GPUs in float32.
#include "plexus/cpp/plugin.hpp"
#include "common.hpp"
#include "plexus_kernels/threading.hpp"

namespace {

// All of the plugin's parallelism is OpenMP; OpenBLAS runs single-threaded inside it (see
// plugins/common/kernels/README.md for why and what was measured). The OpenMP runtime is pinned in
// memory so that unloading this plugin does not unload it under its own worker threads.
void init(plexus::sdk::Host host) {
  if (!plexus::kernels::init_for_plugin())
    host.warn(
        "could not pin the OpenMP runtime in memory: unloading this plugin may crash its worker threads");
  if (host.logs(PLX_LOG_DEBUG))
    host.log(PLX_LOG_DEBUG, std::string("threading: ") + plexus::kernels::threading_description());
}

#if defined(PLEXUS_TRANSFORMER_HAVE_CUDA)
constexpr const char* kDescription =
    "GPT transformer layers for the CPU (float32 and float64) and CUDA GPUs (float32): embedding, "
    "attention, mlp, norm, lm_head; mtp_entry (CPU)";
#else
constexpr const char* kDescription =
    "GPT transformer layers for the CPU (float32 and float64): embedding, attention, mlp, norm, "
    "lm_head, mtp_entry";
#endif

}  // namespace

PLEXUS_PLUGIN_WITH_INIT("transformer", "1.0.0", kDescription, &init,
                        plexus::transformer::embedding_component(),
                        plexus::transformer::attention_component(), plexus::transformer::mlp_component(),
                        plexus::transformer::norm_component(), plexus::transformer::lm_head_component(),
                        plexus::transformer::mtp_entry_component())

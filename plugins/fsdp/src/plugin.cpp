// The fsdp plugin: the data-parallel strategy component "fsdp" (plexus/data_parallel.h), which
// keeps values, gradients and the optimizer's shard whole or sharded over each unit's group as
// its "strategy" option says. See README.md.
#include "fsdp_strategy.hpp"
#include "plexus/cpp/components.hpp"
#include "plexus/cpp/plugin.hpp"

namespace {

// "strategy" is a plain string here, not an enum: the plugin itself refuses an unknown one, so
// the message can suggest the nearest valid value (the schema validator lists an enum's values
// but suggests none).
constexpr const char* kSchema = R"json({
  "type": "object",
  "doc": "How the data-parallel ranks share parameters, gradients and optimizer state.",
  "properties": {
    "strategy": {"type": "string", "default": "no_shard",
                 "doc": "no_shard (DDP: everything whole, gradients all-reduced), optim (ZeRO-1: the optimizer's shard), optim_grads (ZeRO-2: and the gradients), optim_grads_params (ZeRO-3 / FSDP: and the values, gathered around each unit's use)"},
    "prefetch": {"type": "boolean", "default": true,
                 "doc": "optim_grads_params: start a unit's gather when the engine announces its use, overlapping it with the current unit's compute"}
  }
})json";

const plx_component_desc kFsdp = plexus::sdk::data_parallel_component<fsdp::FsdpStrategy>(
    "fsdp", "data parallelism: DDP, ZeRO-1, ZeRO-2 or ZeRO-3 (FSDP) over each unit's group", kSchema);

}  // namespace

PLEXUS_PLUGIN("fsdp", "1.0.0", "Data-parallel strategies: replicated (DDP) and sharded (ZeRO-1/2/3, FSDP)", &kFsdp)

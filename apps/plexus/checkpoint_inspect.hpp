// `plexus checkpoint inspect`: what a checkpoint holds, as a table for a person or as JSON.
#pragma once

#include <ostream>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus::cli {

// Prints the step and the rest of state.json but the config, a summary of the model (the decoder in
// its stack's words, from the saved config's stack plugin, found on demand through `plugins`; the
// hidden size, heads, sequence and vocabulary), every tensor of model.safetensors grouped by decoder
// layer (name, shape, dtype, bytes) with the totals and the layers the stack stores there, and the
// optimizer file's count and bytes. The JSON adds the whole run config and the decoder. A stack
// that cannot be loaded or planned leaves the decoder described as unknown, saying why; the tensors
// are printed all the same. The checkpoint was validated when loaded (COMPLETE present, sizes as
// recorded). With `check` (inspect --verify), what verify_checkpoint found is printed too: per
// file, the tensors checked and whether by checksum, and every problem ("verification" in JSON).
void print_inspection(const checkpoint::LoadedCheckpoint& loaded, bool json, const PluginLoadOptions& plugins,
                      std::ostream& out, const checkpoint::CheckpointCheck* check = nullptr);

}  // namespace plexus::cli

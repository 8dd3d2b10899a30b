// `plexus checkpoint inspect`: what a checkpoint holds, as a table for a person or as JSON.
#pragma once

#include <ostream>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"

namespace plexus::cli {

// Prints the step and the rest of state.json but the config, a summary of the run config's model
// section, every tensor of model.safetensors grouped by decoder layer (name, shape, dtype, bytes)
// with the totals, and the optimizer file's count and bytes. The JSON adds the whole run config.
// The checkpoint was validated when loaded (COMPLETE present, sizes as recorded).
void print_inspection(const checkpoint::LoadedCheckpoint& loaded, bool json, std::ostream& out);

}  // namespace plexus::cli

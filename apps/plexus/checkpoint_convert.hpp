// `plexus checkpoint convert`: a checkpoint written as a new checkpoint of another decoder layout
// of the same layers (a GPT and Megatron's hybrid patterns of attention and MLP layers).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "plexus/core/run_config.hpp"

namespace plexus::cli {

enum class Direction {
  gpt_to_hybrid,  // a GPT (or "[*-]" x L) to a pattern, by default the ungrouped "*-" x L
  hybrid_to_gpt,  // a pattern of '*' and '-' layers to the GPT
};

struct ConvertRequest {
  std::filesystem::path source;       // a checkpoint directory
  std::filesystem::path destination;  // must not exist
  Direction direction = Direction::gpt_to_hybrid;
  std::string pattern;        // --hybrid-layer-pattern; empty: the default (or the source's)
  PluginLoadOptions plugins;  // where the model's stack plugin is found
};

struct ConvertResult {
  std::filesystem::path destination;
  std::int64_t step = 0;
  std::string from;  // "the GPT of 2 layers", "the pattern \"*-*-\""
  std::string to;
  std::string pattern;          // the destination's model.pattern ("" for the GPT)
  std::int64_t num_layers = 0;  // the destination's model.num_layers
  std::size_t model_tensors = 0, optimizer_tensors = 0, renamed = 0;
};

// Loads the source (refusing a partial or damaged one, naming the file), pairs its layers with the
// destination layout's (checkpoint_rename.hpp), renames every parameter and optimizer state, and
// writes the destination with the core's checkpoint writer (COMPLETE last, no replacement). The
// step, the data position and the whole state are kept; the run config's model.pattern and
// model.num_layers describe the destination. Throws with a message naming the file, key or layer.
ConvertResult convert_checkpoint(const ConvertRequest& request);

}  // namespace plexus::cli

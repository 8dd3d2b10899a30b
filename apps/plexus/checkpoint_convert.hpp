// `plexus checkpoint convert`: a checkpoint written as a new checkpoint of another decoder layout
// of the same layers (a GPT and Megatron's hybrid patterns of attention and MLP layers).
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

#include "checkpoint_rename.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus::cli {

// The model a checkpoint was written with, read back as a resume reads it: its run config from
// state.json, with the plugin of the config's stack loaded (found on demand, as a run finds it) and
// the defaults of the framework and of the stack filled in. Everything about the decoder is then
// asked of the stack's plan, and what a layer stores of the layer itself (shared by `plexus
// checkpoint convert` and `inspect`).
class SavedModel {
 public:
  // Throws CheckpointError naming state.json when it holds no run config or one not valid here,
  // and config::ConfigError naming model.stack.component when no plugin provides the stack.
  SavedModel(const checkpoint::LoadedCheckpoint& loaded, const PluginLoadOptions& plugins);
  SavedModel(const SavedModel&) = delete;
  SavedModel& operator=(const SavedModel&) = delete;

  const boost::json::value& saved() const noexcept { return saved_; }    // as state.json holds it
  const boost::json::value& config() const noexcept { return config_; }  // defaults filled in
  const std::filesystem::path& state_file() const noexcept { return state_file_; }

  // The stack's plan of `config` (this one, or another decoder of it), its layers' options
  // unchecked: no layer's plugin is needed. Errors are prefixed with `context`.
  DecoderPlan plan(const boost::json::value& config, const std::string& context) const;
  // The plan of this config as the GPT of `layers` layers.
  DecoderPlan gpt_plan(std::size_t layers) const;

  // Builds the model of `config` without allocating its parameters (loading the plugins of its
  // layers, embedding, final norm, head and mHC backend on demand) and reads each main decoder
  // layer's modules from it (checkpoint_rename.hpp). Errors are prefixed with `context`.
  LayerModules layer_modules(const boost::json::value& config, const std::string& context);

 private:
  PluginHost host_;  // declared first, so unloaded last: after everything built of its plugins
  PluginLoadOptions plugins_;
  std::filesystem::path state_file_;
  boost::json::value saved_;
  boost::json::value config_;
};

// config with the decoder described by (pattern, num_layers) of the stack's model keys, every other
// key as it was; an empty pattern is the GPT of num_layers layers.
boost::json::value with_decoder(boost::json::value config, const std::string& pattern,
                                std::int64_t num_layers);

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

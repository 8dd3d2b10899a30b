// The decoder as the model's stack component describes it (plexus/stack.h), in the engine's
// terms: which layer component each decoder layer is, with its validated options, its numbers and
// checkpoint names. The model is assembled from this and nothing else; `plexus model show` and
// `plexus config check` read it too.
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "plexus/core/plugin_host.hpp"

namespace plexus {

struct DecoderLayerPlan {
  std::string symbol;     // "*", "-", "M", ... as in the pattern
  std::string component;  // the layer component
  std::string component_key;  // the config key that names it, for messages ("model.attention.component")
  boost::json::value options;  // validated against the component's schema when it is loaded
  std::string options_path;    // "model.attention.options"
  std::string checkpoint_prefix;  // "decoder.layers.3."
  std::string connection_prefix;  // "self_attention_hyper_connection."
  uint32_t physical = 0, logical = 0, segment = 0, mtp_depth = 0;
};

struct DecoderPlan {
  std::string stack;  // the stack component
  std::vector<DecoderLayerPlan> layers;  // main decoder in order, then the MTP blocks'
  uint32_t num_logical = 0, num_segments = 1, mtp_depths = 0;
  std::string final_norm_prefix;                // "decoder.final_layernorm."
  std::vector<std::string> final_norm_aliases;  // other prefixes loading accepts
  bool has_pattern = false;                     // model.pattern was given (a hybrid model)
  uint32_t main_layers() const;                 // physical layers of the main decoder
};

// Creates the model's stack component (model.stack) with its validated options and reads its
// description. With validate_layers, every described layer's component must be loaded and its
// options are validated (defaults filled); without, only the names are read (to load plugins on
// demand first). Throws config::ConfigError naming the key, or ComponentCallError with the stack's
// own message (a pattern error names the character).
DecoderPlan plan_decoder(const PluginHost& host, const boost::json::value& run_config, bool validate_layers = true);

}  // namespace plexus

// The decoder as the model's stack component describes it (plexus/stack.h), in the engine's
// terms: which layer component each decoder layer is, with its validated options, its numbers,
// its label and checkpoint names. It is the only source of decoder facts: the model is assembled
// from this and nothing else, and `plexus model show`, `plexus config check`, `plexus
// checkpoint convert|inspect` and the resume check read it too; nothing else reads model.pattern.
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "plexus/core/plugin_host.hpp"

namespace plexus {

struct DecoderLayerPlan {
  std::string symbol;     // the stack's symbol for it ("*", "M"), for `model show`; the engine never reads it
  std::string kind;       // the stack's word for it: "attention", "mamba" (plx_stack_layer.kind)
  std::string label;      // "decoder.layers.3 attention": its checkpoint prefix and kind, for messages
  std::string component;  // the layer component
  std::string component_key;      // the config key that names it, for messages ("model.attention.component")
  boost::json::value options;     // validated against the component's schema when it is loaded
  std::string options_path;       // "model.attention.options"
  std::string checkpoint_prefix;  // "decoder.layers.3."
  std::string connection_prefix;  // "self_attention_hyper_connection."
  uint32_t physical = 0, logical = 0, segment = 0, mtp_depth = 0;
};

struct DecoderPlan {
  std::string stack;                     // the stack component
  std::vector<DecoderLayerPlan> layers;  // main decoder in order, then the MTP blocks'
  uint32_t num_logical = 0, num_segments = 1, mtp_depths = 0;
  std::string final_norm_prefix;                // "decoder.final_layernorm."
  std::vector<std::string> final_norm_aliases;  // other prefixes loading accepts
  std::string summary;  // the stack's words for the decoder: "the GPT of 4 layers", "the pattern \"M*M-\""
  // The model keys the layout is spelled by (plx_stack_description.layout_keys): compared through
  // the layout, not one by one.
  std::vector<std::string> layout_keys;
  uint32_t main_layers() const;  // physical layers of the main decoder: those that add to its residual stream
};

// Creates the model's stack component (model.stack) with its validated options and reads its
// description. With validate_layers, every described layer's component must be loaded and its
// options are validated (defaults filled); without, only the names are read (to load plugins on
// demand first). Throws config::ConfigError naming the key, or ComponentCallError with the stack's
// own message (a pattern error names the character).
DecoderPlan plan_decoder(const PluginHost& host, const boost::json::value& run_config,
                         bool validate_layers = true);

}  // namespace plexus

// The hybrid_stack plugin: the decoder's structure from Megatron-LM's hybrid layer pattern.
#include <boost/json.hpp>

#include <memory>

#include "plexus/cpp/plugin.hpp"
#include "stack.hpp"

namespace {

class HybridStack {
 public:
  explicit HybridStack(const plx_stack_create_args& args) {
    const auto host = plexus::sdk::Host::current();
    const boost::json::value model = boost::json::parse(host.config_json(args.model_config));
    const boost::json::value options = boost::json::parse(host.config_json(args.config));
    try {
      stack_ = std::make_unique<plexus::hybrid::Stack>(model, options);
    } catch (const std::invalid_argument& e) {
      throw plexus::sdk::Error(PLX_ERR_INVALID_ARGUMENT, e.what());
    }
  }
  const plx_stack_description& describe() const { return stack_->description(); }

 private:
  std::unique_ptr<plexus::hybrid::Stack> stack_;
};

constexpr const char* kSchema = R"({
  "type": "object",
  "doc": "The decoder from model.pattern (Megatron's hybrid_layer_pattern); without one, the GPT: [*-] x model.num_layers.",
  "properties": {
    "symbols": {
      "type": "object",
      "additional_properties": true,
      "default": {},
      "doc": "Pattern symbols mapped to layer components: {\"X\": {\"component\": NAME, \"options\": {...}, \"family\": KEYS}}; adds a symbol or remaps a built-in one ('*', '-', 'M', 'E')."
    }
  }
})";

const plx_component_desc kHybridStack = plexus::sdk::stack_component<HybridStack>(
    "hybrid_stack", "decoder layers from a hybrid layer pattern (M * - E, [ ] groups, | segments, / MTP)",
    kSchema);

}  // namespace

PLEXUS_PLUGIN("hybrid_stack", "1.0.0", "The decoder's structure from Megatron's hybrid layer pattern",
              &kHybridStack)

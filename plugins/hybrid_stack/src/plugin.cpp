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

// The model keys this stack reads, declared so that the host checks them (unknown keys, types,
// defaults) like its own: the layer of each built-in pattern symbol, '*' model.attention, '-'
// model.mlp, 'M' model.mamba, 'E' model.moe (symbols.cpp), and the GPT's model.moe.layer_freq
// and model.mtp_num_layers (stack.cpp). "component_kind" makes attention and mlp component sections, whose
// options the host validates and fills whenever a config is checked (the GPT's layers; checkpoints' saved
// configs have always held them filled); mamba's and moe's options are validated when the decoder has such a
// layer (their plugins load only then), through this stack's description, and kept as written.
constexpr const char* kModelSchema = R"({
  "type": "object",
  "properties": {
    "attention": {
      "type": "object",
      "doc": "Self-attention sublayer (with its pre-norm).",
      "component_kind": "layer",
      "properties": {
        "component": {
          "type": "string",
          "default": "transformer.attention",
          "doc": "A layer component."
        },
        "options": {
          "type": "object",
          "additional_properties": true,
          "default": {},
          "doc": "Validated against the component's own schema."
        }
      }
    },
    "mlp": {
      "type": "object",
      "doc": "MLP sublayer (with its pre-norm).",
      "component_kind": "layer",
      "properties": {
        "component": {
          "type": "string",
          "default": "transformer.mlp",
          "doc": "A layer component."
        },
        "options": {
          "type": "object",
          "additional_properties": true,
          "default": {},
          "doc": "Validated against the component's own schema."
        }
      }
    },
    "mamba": {
      "type": "object",
      "doc": "The layer of the pattern symbol M: Mamba-2 with its pre-norm.",
      "properties": {
        "component": {
          "type": "string",
          "default": "mamba.mixer",
          "doc": "A layer component."
        },
        "options": {
          "type": "object",
          "additional_properties": true,
          "default": {},
          "doc": "Validated against the component's own schema when the pattern uses M."
        }
      }
    },
    "moe": {
      "type": "object",
      "doc": "The layer of the pattern symbol E: a mixture-of-experts MLP with its pre-norm (plugins/moe).",
      "properties": {
        "component": {
          "type": "string",
          "default": "moe.layer",
          "doc": "A layer component."
        },
        "options": {
          "type": "object",
          "additional_properties": true,
          "default": {},
          "doc": "Validated against the component's own schema when the decoder has an MoE layer."
        },
        "layer_freq": {
          "type": "integer",
          "minimum": 0,
          "default": 0,
          "doc": "The GPT (no model.pattern) only: every layer_freq-th layer's MLP is an MoE layer, starting with layer 0 (Megatron-LM's moe_layer_freq); 0: none. With a pattern, E marks the MoE layers."
        }
      }
    },
    "mtp_num_layers": {
      "type": "integer",
      "minimum": 0,
      "default": 0,
      "doc": "Multi-token-prediction depths (Megatron-LM's mtp_num_layers): the GPT gets this many MTP blocks, each one layer like its last decoder layer; with model.pattern the '/' parts are the blocks and this is 0 or their number."
    }
  }
})";

const plx_component_desc kHybridStack = plexus::sdk::stack_component<HybridStack>(
    "hybrid_stack", "decoder layers from a hybrid layer pattern (M * - E, [ ] groups, | segments, / MTP)",
    kSchema, kModelSchema);

}  // namespace

PLEXUS_PLUGIN("hybrid_stack", "1.0.0", "The decoder's structure from Megatron's hybrid layer pattern",
              &kHybridStack)

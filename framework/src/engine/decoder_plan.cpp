#include "plexus/core/engine/decoder_plan.hpp"

#include <boost/json.hpp>

#include "plexus/core/components.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/run_config.hpp"
#include "plexus/stack.h"

namespace plexus {
namespace {

// The stack component's object for the time of one reading of its description.
class StackInstance {
 public:
  StackInstance(const Component& component, plx_config options, plx_config model)
      : component_(&component), table_(&component.as<plx_stack_v1>()) {
    plx_stack_create_args args{};
    args.struct_size = sizeof(args);
    args.config = options;
    args.model_config = model;
    check_call(component, "create", table_->create(&args, &stack_));
  }
  ~StackInstance() {
    if (stack_ != nullptr) table_->destroy(stack_);
  }
  StackInstance(const StackInstance&) = delete;
  StackInstance& operator=(const StackInstance&) = delete;

  const plx_stack_description& describe() const {
    const plx_stack_description* out = nullptr;
    check_call(*component_, "describe", table_->describe(stack_, &out));
    if (out == nullptr)
      throw ComponentCallError(PLX_ERR_INTERNAL, component_->name + ": describe returned nothing");
    return *out;
  }

 private:
  const Component* component_;
  const plx_stack_v1* table_;
  void* stack_ = nullptr;
};

std::string text_of(const Component& stack, const char* value, const char* field) {
  if (value == nullptr)
    throw ComponentCallError(PLX_ERR_INTERNAL,
                             stack.name + ": the stack description leaves " + std::string(field) + " empty");
  return value;
}

std::vector<std::string> split_aliases(const char* text) {
  std::vector<std::string> out;
  if (text == nullptr) return out;
  std::string current;
  for (const char* c = text;; ++c) {
    if (*c == ';' || *c == '\0') {
      if (!current.empty()) out.push_back(current);
      current.clear();
      if (*c == '\0') break;
    } else {
      current += *c;
    }
  }
  return out;
}

}  // namespace

uint32_t DecoderPlan::main_layers() const {
  uint32_t n = 0;
  for (const DecoderLayerPlan& layer : layers) n += layer.mtp_depth == 0 ? 1 : 0;
  return n;
}

DecoderPlan plan_decoder(const PluginHost& host, const boost::json::value& run_config, bool validate_layers) {
  const boost::json::value& model = run_config.at("model");
  const boost::json::value& stack_section = model.at("stack");
  DecoderPlan plan;
  plan.stack = std::string(stack_section.at("component").as_string());
  const Component* stack = host.find(PLX_KIND_STACK, plan.stack);
  if (stack == nullptr) {
    try {
      (void)host.get(PLX_KIND_STACK, plan.stack);
    } catch (const PluginError& e) {
      throw config::ConfigError("model.stack.component", e.what());
    }
  }
  ConfigHandle options(
      validated_component_options(
          *stack,
          stack_section.as_object().contains("options") ? stack_section.at("options") : boost::json::value(),
          "model.stack.options"),
      "model.stack.options");
  ConfigHandle model_config(model, "model");
  const StackInstance instance(*stack, options.get(), model_config.get());
  const plx_stack_description& d = instance.describe();
  if (d.num_layers > 0 && d.layers == nullptr)
    throw ComponentCallError(PLX_ERR_INTERNAL,
                             stack->name + ": the stack description lists layers but no array");
  plan.num_logical = d.num_logical;
  plan.num_segments = d.num_segments == 0 ? 1 : d.num_segments;
  plan.mtp_depths = d.mtp_depths;
  plan.final_norm_prefix = text_of(*stack, d.final_norm_prefix, "final_norm_prefix");
  plan.final_norm_aliases = split_aliases(d.final_norm_aliases);
  if (PLX_HAS_FIELD(&d, plx_stack_description, layout_keys)) plan.layout_keys = split_aliases(d.layout_keys);
  plan.summary = PLX_HAS_FIELD(&d, plx_stack_description, summary) && d.summary != nullptr
                     ? std::string(d.summary)
                     : "the decoder of " + std::to_string(d.num_layers) + " layers (" + plan.stack + ")";
  for (uint32_t i = 0; i < d.num_layers; ++i) {
    const plx_stack_layer* l = d.layers[i];
    if (l == nullptr)
      throw ComponentCallError(PLX_ERR_INTERNAL, stack->name + ": layer " + std::to_string(i) + " is NULL");
    DecoderLayerPlan layer;
    layer.symbol = text_of(*stack, l->symbol, "a layer's symbol");
    layer.component = text_of(*stack, l->component, "a layer's component");
    layer.options_path = l->options_path != nullptr ? l->options_path : "model.stack.options";
    const std::string suffix = ".options";
    layer.component_key =
        layer.options_path.size() > suffix.size() &&
                layer.options_path.compare(layer.options_path.size() - suffix.size(), suffix.size(),
                                           suffix) == 0
            ? layer.options_path.substr(0, layer.options_path.size() - suffix.size()) + ".component"
            : "model.stack.options";
    try {
      layer.options = boost::json::parse(l->options != nullptr ? l->options : "{}");
    } catch (const std::exception& e) {
      throw ComponentCallError(PLX_ERR_INTERNAL, stack->name + ": layer " + std::to_string(i) +
                                                     "'s options are not JSON: " + e.what());
    }
    layer.checkpoint_prefix = text_of(*stack, l->checkpoint_prefix, "a layer's checkpoint_prefix");
    // A stack built before ABI 1.6 has no kind: the label says the symbol instead.
    layer.kind = PLX_HAS_FIELD(l, plx_stack_layer, kind) && l->kind != nullptr
                     ? std::string(l->kind)
                     : "layer '" + layer.symbol + "'";
    const std::string& prefix = layer.checkpoint_prefix;
    layer.label = (prefix.ends_with('.') ? prefix.substr(0, prefix.size() - 1) : prefix) + " " + layer.kind;
    layer.connection_prefix = l->connection_prefix != nullptr ? l->connection_prefix : "";
    layer.physical = l->physical_index;
    layer.logical = l->logical_index;
    layer.segment = l->segment;
    layer.mtp_depth = l->mtp_depth;
    if (validate_layers) {
      const Component* component = host.find(PLX_KIND_LAYER, layer.component);
      if (component == nullptr) {
        std::string what;
        try {
          (void)host.get(PLX_KIND_LAYER, layer.component);
        } catch (const PluginError& e) {
          what = e.what();
        }
        throw config::ConfigError(layer.component_key, "pattern symbol '" + layer.symbol +
                                                           "' needs the layer component '" + layer.component +
                                                           "': " + what);
      }
      layer.options = validated_component_options(*component, layer.options, layer.options_path);
    }
    plan.layers.push_back(std::move(layer));
  }
  return plan;
}

}  // namespace plexus

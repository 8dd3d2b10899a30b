#include "stack.hpp"

#include <boost/json.hpp>

#include <stdexcept>

namespace plexus::hybrid {
namespace {

int64_t model_int(const boost::json::object& model, const char* key) {
  const auto* v = model.if_contains(key);
  if (v == nullptr || !v->is_number()) throw std::invalid_argument(std::string("model.") + key + ": missing");
  return v->to_number<int64_t>();
}

// How the GPT's MoE layers are laid out (Megatron-LM's moe_layer_freq), for the summary.
std::string moe_words(int64_t layer_freq) {
  if (layer_freq == 1) return ", an MoE MLP in every layer (model.moe.layer_freq 1)";
  if (layer_freq > 1)
    return ", an MoE MLP every " + std::to_string(layer_freq) + " layers from layer 0 (model.moe.layer_freq)";
  return "";
}

}  // namespace

Stack::Stack(const boost::json::value& model_value, const boost::json::value& options) {
  const boost::json::object& model = model_value.as_object();
  const SymbolTable symbols(model_value, options.is_object() && options.as_object().contains("symbols")
                                             ? options.at("symbols")
                                             : boost::json::value());
  const int64_t num_layers = model_int(model, "num_layers");
  std::string text;
  if (const auto* p = model.if_contains("pattern"); p != nullptr && p->is_string())
    text = std::string(p->as_string());
  const bool gpt = text.empty();
  int64_t moe_layer_freq = 0;
  if (const auto* moe = model.if_contains("moe"); moe != nullptr && moe->is_object())
    if (const auto* f = moe->as_object().if_contains("layer_freq"); f != nullptr && f->is_number())
      moe_layer_freq = f->to_number<int64_t>();
  if (moe_layer_freq < 0)
    throw std::invalid_argument("model.moe.layer_freq: expected an integer >= 0 (0: no MoE layers), got " +
                                std::to_string(moe_layer_freq));
  if (!gpt && moe_layer_freq > 0)
    throw std::invalid_argument("model.moe.layer_freq (" + std::to_string(moe_layer_freq) +
                                ") applies to the GPT only; with model.pattern \"" + text +
                                "\" the symbol E marks the MoE layers: remove one of the two");
  int64_t mtp_num_layers = 0;
  if (const auto* m = model.if_contains("mtp_num_layers"); m != nullptr && m->is_number())
    mtp_num_layers = m->to_number<int64_t>();
  if (mtp_num_layers < 0)
    throw std::invalid_argument("model.mtp_num_layers: expected an integer >= 0, got " +
                                std::to_string(mtp_num_layers));
  // Megatron's GPT builds each MTP block's layer from the last decoder layer's spec.
  if (gpt)
    text =
        gpt_pattern(num_layers, moe_layer_freq) + gpt_mtp_parts(num_layers, moe_layer_freq, mtp_num_layers);

  SymbolRules rules;
  rules.is_layer = [&](char c) { return symbols.contains(c); };
  rules.key_family = [&](char c) { return symbols.at(c).family; };
  rules.valid_symbols = [&] { return symbols.valid_symbols(); };
  try {
    pattern_ = parse_pattern(text, rules);
  } catch (const PatternError& e) {
    throw std::invalid_argument("model.pattern: " + std::string(e.what()));
  }
  if (!gpt && mtp_num_layers != 0 && mtp_num_layers != pattern_.mtp_depths)
    throw std::invalid_argument(
        "model.mtp_num_layers is " + std::to_string(mtp_num_layers) + ", but model.pattern \"" + text +
        "\" has " + std::to_string(pattern_.mtp_depths) + " MTP block(s) ('/' parts): set it to " +
        std::to_string(pattern_.mtp_depths) + " or 0");
  // Megatron's rule: num_layers counts the pattern's physical layers (of the main decoder).
  if (!gpt && pattern_.main_layers != num_layers)
    throw std::invalid_argument("model.num_layers is " + std::to_string(num_layers) +
                                ", but model.pattern \"" + text + "\" has " +
                                std::to_string(pattern_.main_layers) + " layers: set model.num_layers to " +
                                std::to_string(pattern_.main_layers));

  strings_.reserve(pattern_.layers.size());
  for (const PatternLayer& layer : pattern_.layers) {
    const SymbolSpec& spec = symbols.at(layer.symbol);
    LayerStrings s;
    s.symbol = std::string(1, layer.symbol);
    s.component = spec.component;
    s.options = spec.options;
    s.options_path = spec.options_path;
    // Megatron's keys: every layer of a group under the group's logical index, so "[*-]" writes
    // a GPT layer's keys; without groups the logical index is the physical one. An MTP block's
    // inner layer is the GPT's mtp.layers.k.transformer_layer. (its one transformer layer) or a
    // hybrid's mtp.layers.k.mtp_model_layer.layers.j. (its nested stack, numbered from 0).
    if (layer.mtp_depth == 0)
      s.checkpoint_prefix = "decoder.layers." + std::to_string(layer.logical) + ".";
    else if (gpt)
      s.checkpoint_prefix = "mtp.layers." + std::to_string(layer.mtp_depth - 1) + ".transformer_layer.";
    else
      s.checkpoint_prefix = "mtp.layers." + std::to_string(layer.mtp_depth - 1) + ".mtp_model_layer.layers." +
                            std::to_string(layer.physical) + ".";
    s.connection_prefix = spec.connection;
    s.kind = spec.kind;
    strings_.push_back(std::move(s));
  }
  layers_.resize(pattern_.layers.size());
  for (std::size_t i = 0; i < pattern_.layers.size(); ++i) {
    const PatternLayer& p = pattern_.layers[i];
    plx_stack_layer& l = layers_[i];
    l.struct_size = sizeof(plx_stack_layer);
    l.physical_index = p.physical;
    l.logical_index = p.logical;
    l.segment = p.segment;
    l.mtp_depth = p.mtp_depth;
    l.symbol = strings_[i].symbol.c_str();
    l.component = strings_[i].component.c_str();
    l.options = strings_[i].options.c_str();
    l.options_path = strings_[i].options_path.c_str();
    l.checkpoint_prefix = strings_[i].checkpoint_prefix.c_str();
    l.connection_prefix = strings_[i].connection_prefix.c_str();
    l.kind = strings_[i].kind.c_str();
    pointers_.push_back(&l);
  }
  // Megatron: GPT and grouped hybrids name the final norm decoder.final_layernorm, ungrouped
  // hybrids decoder.final_norm; loading accepts either.
  const bool layernorm_name = gpt || pattern_.has_groups;
  final_norm_prefix_ = layernorm_name ? "decoder.final_layernorm." : "decoder.final_norm.";
  final_norm_aliases_ = layernorm_name ? "decoder.final_norm." : "decoder.final_layernorm.";

  description_.struct_size = sizeof(description_);
  description_.num_layers = static_cast<uint32_t>(layers_.size());
  description_.num_logical = pattern_.logical_layers;
  description_.num_segments = pattern_.segments;
  description_.mtp_depths = pattern_.mtp_depths;
  description_.layers = pointers_.data();
  description_.final_norm_prefix = final_norm_prefix_.c_str();
  description_.final_norm_aliases = final_norm_aliases_.c_str();
  summary_ = gpt ? "the GPT of " + std::to_string(num_layers) + " layers" + moe_words(moe_layer_freq) +
                       (mtp_num_layers > 0 ? " and " + std::to_string(mtp_num_layers) + " MTP block(s)" : "")
                 : "the pattern \"" + text + "\"";
  description_.summary = summary_.c_str();
  description_.layout_keys = "num_layers;pattern;mtp_num_layers";
}

}  // namespace plexus::hybrid

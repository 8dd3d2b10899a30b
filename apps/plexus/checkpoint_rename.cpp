#include "checkpoint_rename.hpp"

#include <algorithm>
#include <stdexcept>

namespace plexus::cli {
namespace {

constexpr const char* kAttention = "*";
constexpr const char* kMlp = "-";

// Megatron's module names under a layer's prefix: the first part of every tensor name the layer
// writes, in the local spelling (input_layernorm.weight, self_attention.linear_qkv.weight) and in
// Transformer Engine's (self_attention.linear_qkv.layer_norm_weight), plus its mHC connection.
std::vector<std::string> modules_of(const DecoderLayerPlan& layer) {
  std::vector<std::string> modules = layer.symbol == kAttention
                                         ? std::vector<std::string>{"self_attention", "input_layernorm"}
                                         : std::vector<std::string>{"mlp", "pre_mlp_layernorm"};
  std::string connection = layer.connection_prefix;
  if (!connection.empty() && connection.back() == '.') connection.pop_back();
  if (!connection.empty()) modules.push_back(connection);
  return modules;
}

std::string join(const std::vector<std::string>& parts, const std::string& suffix) {
  std::string text;
  for (const auto& part : parts) text += (text.empty() ? "" : ", ") + part + suffix;
  return text;
}

std::vector<const DecoderLayerPlan*> layers_of(const DecoderPlan& plan, const std::string& symbol) {
  std::vector<const DecoderLayerPlan*> found;
  for (const DecoderLayerPlan& layer : plan.layers)
    if (layer.mtp_depth == 0 && layer.symbol == symbol) found.push_back(&layer);
  return found;
}

}  // namespace

std::size_t check_gpt_compatible(const DecoderPlan& plan, const std::string& what) {
  if (plan.mtp_depths > 0)
    throw std::invalid_argument(what +
                                " has multi-token-prediction layers ('/' in the pattern), which have no GPT "
                                "counterpart");
  std::size_t attention = 0, mlp = 0;
  for (const DecoderLayerPlan& layer : plan.layers) {
    if (layer.symbol == kAttention)
      ++attention;
    else if (layer.symbol == kMlp)
      ++mlp;
    else
      throw std::invalid_argument(
          what + ": layer " + std::to_string(layer.physical) + " is '" + layer.symbol + "' (" +
          layer.component +
          "), which has no GPT counterpart: only attention ('*') and MLP ('-') layers convert "
          "(weights are never made up)");
  }
  if (attention != mlp)
    throw std::invalid_argument(what + " has " + std::to_string(attention) + " attention layers ('*') and " +
                                std::to_string(mlp) + " MLP layers ('-'): every GPT layer is one of each");
  return attention;
}

std::string storage_layout(const DecoderPlan& plan) {
  std::string text;
  for (const DecoderLayerPlan& layer : plan.layers)
    if (layer.mtp_depth == 0) text += layer.symbol + " " + layer.checkpoint_prefix + "\n";
  return text + "final norm " + plan.final_norm_prefix + "\n";
}

LayoutRenaming::LayoutRenaming(const DecoderPlan& from, const DecoderPlan& to) {
  for (const char* symbol : {kAttention, kMlp}) {
    const auto sources = layers_of(from, symbol);
    const auto targets = layers_of(to, symbol);
    if (sources.size() != targets.size())
      throw std::invalid_argument(std::string("the source has ") + std::to_string(sources.size()) + " '" +
                                  symbol + "' layers, the destination " + std::to_string(targets.size()) +
                                  ": each layer needs its counterpart");
    for (std::size_t i = 0; i < sources.size(); ++i)
      layers_[sources[i]->checkpoint_prefix].push_back(
          {symbol, modules_of(*sources[i]), targets[i]->checkpoint_prefix});
  }
  for (const DecoderLayerPlan& layer : from.layers)
    if (layer.mtp_depth == 0 && layer.symbol != kAttention && layer.symbol != kMlp)
      throw std::invalid_argument("the source's layer " + std::to_string(layer.physical) + " ('" +
                                  layer.symbol + "') has no counterpart");
  from_final_norm_.push_back(from.final_norm_prefix);
  for (const auto& alias : from.final_norm_aliases) from_final_norm_.push_back(alias);
  to_final_norm_ = to.final_norm_prefix;
}

std::string LayoutRenaming::rename(const std::string& name) const {
  // The longest source prefix the name starts with (prefixes end with '.', so at most one layer
  // index matches; the longest rule keeps nested prefixes of another stack right).
  const std::pair<const std::string, std::vector<Member>>* layer = nullptr;
  for (const auto& entry : layers_)
    if (name.starts_with(entry.first) && (layer == nullptr || entry.first.size() > layer->first.size()))
      layer = &entry;
  if (layer != nullptr) {
    const std::string rest = name.substr(layer->first.size());
    const std::vector<Member>& members = layer->second;
    if (members.size() == 1) return members.front().to_prefix + rest;
    const std::string module = rest.substr(0, rest.find('.'));
    for (const Member& member : members)
      if (std::find(member.modules.begin(), member.modules.end(), module) != member.modules.end())
        return member.to_prefix + rest;
    std::string known;
    for (const Member& member : members)
      known +=
          std::string(known.empty() ? "" : "; ") + "'" + member.symbol + "': " + join(member.modules, ".*");
    throw std::invalid_argument("tensor " + name + ": no layer of the group stored under " + layer->first +
                                " holds the module '" + module + "' (" + known + ")");
  }
  for (const std::string& prefix : from_final_norm_)
    if (name.starts_with(prefix)) return to_final_norm_ + name.substr(prefix.size());
  if (name.starts_with("decoder.layers."))
    throw std::invalid_argument("tensor " + name + " is under no layer of the source's decoder");
  return name;
}

}  // namespace plexus::cli

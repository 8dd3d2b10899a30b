#include "checkpoint_rename.hpp"

#include <algorithm>
#include <stdexcept>

namespace plexus::cli {
namespace {

std::vector<const DecoderLayerPlan*> main_layers(const DecoderPlan& plan) {
  std::vector<const DecoderLayerPlan*> found;
  for (const DecoderLayerPlan& layer : plan.layers)
    if (layer.mtp_depth == 0) found.push_back(&layer);
  return found;
}

// How many main decoder layers of each component a plan has, in the order the components first
// appear, with the stack's word for that component's layers.
struct ComponentCount {
  std::string component;
  std::string kind;
  std::size_t count = 0;
};

std::vector<ComponentCount> counts_of(const DecoderPlan& plan) {
  std::vector<ComponentCount> counts;
  for (const DecoderLayerPlan* layer : main_layers(plan)) {
    auto at = std::find_if(counts.begin(), counts.end(),
                           [&](const ComponentCount& c) { return c.component == layer->component; });
    if (at == counts.end()) at = counts.insert(counts.end(), {layer->component, layer->kind, 0});
    ++at->count;
  }
  return counts;
}

std::size_t count_of(const std::vector<ComponentCount>& counts, const std::string& component) {
  for (const ComponentCount& c : counts)
    if (c.component == component) return c.count;
  return 0;
}

// "2 attention layers (transformer.attention) and 3 mlp layers (transformer.mlp)": the numbers in
// `counts` of the components of `order`, in its order and in its words.
std::string counts_text(const std::vector<ComponentCount>& order, const std::vector<ComponentCount>& counts) {
  std::string text;
  for (std::size_t i = 0; i < order.size(); ++i) {
    text += i == 0 ? "" : i + 1 == order.size() ? " and " : ", ";
    const std::size_t n = count_of(counts, order[i].component);
    text += std::to_string(n) + " " + order[i].kind + (n == 1 ? " layer" : " layers") + " (" +
            order[i].component + ")";
  }
  return text;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string text;
  for (const auto& part : parts) text += (text.empty() ? "" : separator) + part;
  return text;
}

// "decoder.layers.3." -> "decoder.layers.": where the stack stores its layers, without the index.
std::string stem_of(const std::string& prefix) {
  std::string stem = prefix.ends_with('.') ? prefix.substr(0, prefix.size() - 1) : prefix;
  const std::size_t dot = stem.rfind('.');
  return dot == std::string::npos ? std::string() : stem.substr(0, dot + 1);
}

}  // namespace

std::size_t check_gpt_compatible(const DecoderPlan& plan, const GptPlanner& gpt, const std::string& what) {
  if (plan.mtp_depths > 0)
    throw std::invalid_argument(what + " has multi-token-prediction layers (" +
                                std::to_string(plan.mtp_depths) +
                                " block(s)), which have no GPT counterpart");
  const std::vector<ComponentCount> mine = counts_of(plan);
  std::size_t layers_here = 0;
  for (const ComponentCount& c : mine) layers_here += c.count;
  if (layers_here == 0)
    throw std::invalid_argument(what + " has no decoder layers: there is nothing to convert");
  // What one GPT layer of this config is made of, by its own plan: the GPT whose physical layers
  // are nearest in number is the one this decoder could hold the layers of.
  const std::size_t per_gpt_layer = main_layers(gpt(1)).size();
  if (per_gpt_layer == 0) throw std::invalid_argument("the GPT of this run config has no decoder layers");
  const std::size_t gpt_layers = std::max<std::size_t>(1, (layers_here + per_gpt_layer / 2) / per_gpt_layer);
  const DecoderPlan reference = gpt(gpt_layers);
  const std::vector<ComponentCount> theirs = counts_of(reference);
  for (const DecoderLayerPlan* layer : main_layers(plan))
    if (count_of(theirs, layer->component) == 0) {
      std::vector<std::string> components;
      for (const ComponentCount& c : theirs) components.push_back(c.component);
      throw std::invalid_argument(what + ": layer " + layer->label + " (" + layer->component +
                                  ") has no GPT counterpart: a GPT layer of this config is made of " +
                                  join(components, " and ") +
                                  " layers, and only those convert (weights are never made up)");
    }
  bool same = mine.size() == theirs.size();
  for (const ComponentCount& c : theirs) same = same && count_of(mine, c.component) == c.count;
  if (!same)
    throw std::invalid_argument(what + " has " + counts_text(theirs, mine) +
                                ", which no GPT of this config has (" + reference.summary + " has " +
                                counts_text(theirs, theirs) + ")");
  return gpt_layers;
}

std::string storage_layout(const DecoderPlan& plan) {
  std::string text;
  for (const DecoderLayerPlan* layer : main_layers(plan))
    text += layer->component + " under " + layer->checkpoint_prefix + ", connection " +
            layer->connection_prefix + "\n";
  return text + "final norm under " + plan.final_norm_prefix + "\n";
}

bool shares_prefixes(const DecoderPlan& plan) {
  std::vector<std::string> prefixes;
  for (const DecoderLayerPlan* layer : main_layers(plan)) prefixes.push_back(layer->checkpoint_prefix);
  std::sort(prefixes.begin(), prefixes.end());
  return std::adjacent_find(prefixes.begin(), prefixes.end()) != prefixes.end();
}

LayerModules layer_modules(const Model& model) {
  const std::vector<const DecoderLayerPlan*> layers = main_layers(model.plan());
  LayerModules modules;
  for (const Model::UnitSummary& row : model.summary()) {
    if (row.kind != "decoder") continue;
    // Decoder units are built in the plan's main-decoder order (docs/architecture.md, "The
    // model object"); a model that did otherwise would pair tensors with the wrong layers.
    const std::size_t i = modules.size();
    if (i >= layers.size() || row.physical != static_cast<int64_t>(layers[i]->physical))
      throw std::logic_error("the model's decoder unit " + row.label +
                             " is not the plan's main-decoder layer " +
                             (i < layers.size() ? layers[i]->label : std::string("(none left)")));
    const std::string& prefix = layers[i]->checkpoint_prefix;
    std::vector<std::string> names;
    for (const std::string& tensor : row.tensor_names) {
      if (!tensor.starts_with(prefix))
        throw std::logic_error("the tensor " + tensor + " of " + row.label +
                               " is not under its layer's prefix " + prefix);
      const std::string rest = tensor.substr(prefix.size());
      std::string module = rest.substr(0, rest.find('.'));
      if (std::find(names.begin(), names.end(), module) == names.end()) names.push_back(std::move(module));
    }
    modules.push_back(std::move(names));
  }
  if (modules.size() != layers.size())
    throw std::logic_error("the model has " + std::to_string(modules.size()) + " decoder units, its plan " +
                           std::to_string(layers.size()) + " main decoder layers");
  return modules;
}

LayoutRenaming::LayoutRenaming(const DecoderPlan& from, const DecoderPlan& to,
                               const LayerModules& from_modules) {
  const std::vector<const DecoderLayerPlan*> sources = main_layers(from);
  const std::vector<const DecoderLayerPlan*> targets = main_layers(to);
  const bool grouped = shares_prefixes(from);
  if (grouped && from_modules.size() != sources.size())
    throw std::logic_error("the source's layers share checkpoint prefixes, and their modules were not given");
  // Each component's layers pair in order, so each needs as many in the destination as in the
  // source; the first layer left without a partner is named.
  const std::vector<ComponentCount> in_source = counts_of(from), in_destination = counts_of(to);
  const auto check_partners = [](const std::vector<const DecoderLayerPlan*>& layers,
                                 const std::vector<ComponentCount>& other, const char* side,
                                 const char* other_side) {
    std::map<std::string, std::size_t> seen;
    for (const DecoderLayerPlan* layer : layers)
      if (const std::size_t partners = count_of(other, layer->component); ++seen[layer->component] > partners)
        throw std::invalid_argument(std::string("the ") + side + "'s layer " + layer->label + " (" +
                                    layer->component + ") has no counterpart: the " + other_side + " has " +
                                    std::to_string(partners) + " " + layer->component + " layer(s), the " +
                                    side + " more");
  };
  check_partners(sources, in_destination, "source", "destination");
  check_partners(targets, in_source, "destination", "source");
  // The i-th layer of a component in the source is the i-th of that component in the destination.
  std::map<std::string, std::vector<const DecoderLayerPlan*>> partners;  // component -> destination layers
  for (const DecoderLayerPlan* target : targets) partners[target->component].push_back(target);
  std::map<std::string, std::size_t> taken;  // component -> its destination layers paired so far
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const DecoderLayerPlan& source = *sources[i];
    const DecoderLayerPlan& target = *partners.at(source.component).at(taken[source.component]++);
    layers_[source.checkpoint_prefix].push_back({source.label, source.component,
                                                 grouped ? from_modules[i] : std::vector<std::string>{},
                                                 target.checkpoint_prefix});
  }
  // Within a group a module names one layer only: otherwise a tensor's layer would be a guess.
  for (const auto& [prefix, members] : layers_)
    for (std::size_t a = 0; a < members.size(); ++a)
      for (std::size_t b = a + 1; b < members.size(); ++b)
        for (const std::string& module : members[a].modules)
          if (std::find(members[b].modules.begin(), members[b].modules.end(), module) !=
              members[b].modules.end())
            throw std::invalid_argument("the layers " + members[a].label + " (" + members[a].component +
                                        ") and " + members[b].label + " (" + members[b].component +
                                        "), both stored under " + prefix + ", both hold tensors under '" +
                                        module + "': which layer a tensor belongs to cannot be told");
  for (const DecoderLayerPlan* source : sources)
    if (const std::string stem = stem_of(source->checkpoint_prefix);
        !stem.empty() && std::find(stems_.begin(), stems_.end(), stem) == stems_.end())
      stems_.push_back(stem);
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
      known += std::string(known.empty() ? "" : "; ") + member.label + " (" + member.component +
               "): " + join(member.modules, ".*, ") + ".*";
    throw std::invalid_argument("tensor " + name + ": no layer of the group stored under " + layer->first +
                                " holds the module '" + module + "' (" + known + ")");
  }
  for (const std::string& prefix : from_final_norm_)
    if (name.starts_with(prefix)) return to_final_norm_ + name.substr(prefix.size());
  for (const std::string& stem : stems_)
    if (name.starts_with(stem))
      throw std::invalid_argument(
          "tensor " + name + " is under " + stem +
          ", where the decoder's layers are stored, but under no layer of the source's decoder");
  return name;
}

}  // namespace plexus::cli

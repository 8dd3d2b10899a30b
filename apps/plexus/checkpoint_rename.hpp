// The names a checkpoint's tensors take in another decoder layout of the same layers, for
// `plexus checkpoint convert`. Everything about the decoder comes from the stack's plan
// (plexus/core/engine/decoder_plan.hpp) and the layers themselves; nothing here knows a pattern
// symbol or a tensor name.
//
// The layers are paired by component, as Megatron-LM pairs a GPT with a hybrid model: the i-th
// layer of component X in one layout is the i-th layer of X in the other. (Megatron's rule reads
// "the i-th attention layer is the i-th attention layer, likewise MLP"; the GPT's attention and MLP
// layers are the very components the hybrid pattern's symbols name, so the rules agree.)
//
// A tensor is renamed by its layer's checkpoint prefix only: "decoder.layers.0.<rest>" becomes
// "<the paired layer's prefix><rest>" whatever <rest> is, so every spelling of a parameter, mHC
// connection parameters and optimizer states ("<parameter>.exp_avg") all follow. Only where
// several layers share one prefix (a group, such as a GPT layer) does the first part of <rest> say
// which layer holds the tensor: the layer's modules, read from the layer's own tensor names.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/engine/model.hpp"

namespace plexus::cli {

// The plan of the same run config as the GPT of `layers` layers (layers >= 1): what a GPT is made
// of is learned from the GPT's own plan, never assumed.
using GptPlanner = std::function<DecoderPlan(std::size_t layers)>;

// Refuses (std::invalid_argument, starting with `what`) a decoder that has no GPT counterpart:
// multi-token-prediction layers, a layer whose component no GPT layer of this config is made of
// (named by its label and component), or numbers of layers per component that no GPT has. Returns
// the number of GPT layers whose layers the decoder holds.
std::size_t check_gpt_compatible(const DecoderPlan& plan, const GptPlanner& gpt, const std::string& what);

// One line per main decoder layer: its component, checkpoint prefix and connection prefix, then
// the final norm's prefix. Two decoders with the same text store the same tensors under the same
// names.
std::string storage_layout(const DecoderPlan& plan);

// Whether several of the plan's main decoder layers store their tensors under one prefix (a
// group): only then does renaming need the layers' modules.
bool shares_prefixes(const DecoderPlan& plan);

// Per main decoder layer of the model's plan, in the plan's order: its modules, the first dotted
// part of every checkpoint name of its tensors after its prefix (in every spelling the layer
// declares, its connection's included), from the model's unit summary. Throws std::logic_error
// when the model's decoder units do not follow its plan.
using LayerModules = std::vector<std::vector<std::string>>;
LayerModules layer_modules(const Model& model);

class LayoutRenaming {
 public:
  // Pairs the source's main decoder layers with the destination's by component; throws
  // std::invalid_argument naming the component when their numbers differ. `from_modules` are the
  // source's (layer_modules); they may be empty when !shares_prefixes(from).
  LayoutRenaming(const DecoderPlan& from, const DecoderPlan& to, const LayerModules& from_modules);

  // The destination name of a source tensor (a parameter or an optimizer state). Tensors outside
  // the decoder's layers and final norm (embedding, output layer) keep their names. Throws
  // std::invalid_argument naming the tensor when it lies under "decoder.layers." but under no
  // layer of the source, or in a group and under no module of its layers.
  std::string rename(const std::string& name) const;

 private:
  struct Member {
    std::string label;                 // "decoder.layers.0 attention"
    std::string component;             // "transformer.attention"
    std::vector<std::string> modules;  // the first name parts of the tensors this layer holds
    std::string to_prefix;
  };
  std::map<std::string, std::vector<Member>> layers_;  // source prefix -> the layers stored under it
  std::vector<std::string>
      stems_;  // where the source stores its layers, without the index ("decoder.layers.")
  std::vector<std::string> from_final_norm_;  // the final norm's prefix and its aliases
  std::string to_final_norm_;
};

}  // namespace plexus::cli

// The names a checkpoint's tensors take in another decoder layout of the same layers, for
// `plexus checkpoint convert`. The layers are paired as Megatron-LM pairs a GPT with a hybrid
// model: the i-th attention layer ('*') of one layout is the i-th of the other, and likewise the
// i-th MLP layer ('-'); GPT layer i is the i-th of each.
//
// A tensor is renamed by its layer's checkpoint prefix only: "decoder.layers.0.<rest>" becomes
// "<the paired layer's prefix><rest>" whatever <rest> is, so local and Transformer Engine names,
// mHC connection parameters and optimizer states ("<parameter>.exp_avg") all follow. Only where
// several layers share one prefix (a group, such as a GPT layer) does the first part of <rest> say
// which layer holds the tensor: Megatron's module names of that layer.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "plexus/core/engine/decoder_plan.hpp"

namespace plexus::cli {

// Refuses (std::invalid_argument, starting with `what`) a decoder that has no GPT counterpart:
// a layer that is neither attention ('*') nor MLP ('-'), multi-token-prediction layers, or
// unequal numbers of attention and MLP layers. Returns the number of attention layers.
std::size_t check_gpt_compatible(const DecoderPlan& plan, const std::string& what);

// One line per main decoder layer: its symbol and checkpoint prefix, then the final norm's prefix.
// Two decoders with the same text store the same tensors under the same names.
std::string storage_layout(const DecoderPlan& plan);

class LayoutRenaming {
 public:
  // Both decoders must have passed check_gpt_compatible with the same count; throws
  // std::invalid_argument otherwise.
  LayoutRenaming(const DecoderPlan& from, const DecoderPlan& to);

  // The destination name of a source tensor (a parameter or an optimizer state). Tensors outside
  // the decoder's layers and final norm (embedding, output layer) keep their names. Throws
  // std::invalid_argument naming the tensor when it lies under "decoder.layers." but under no
  // layer of the source, or in a group and under no module name of its layers.
  std::string rename(const std::string& name) const;

 private:
  struct Member {
    std::string symbol;
    std::vector<std::string> modules;  // the first name parts of the tensors this layer holds
    std::string to_prefix;
  };
  std::map<std::string, std::vector<Member>> layers_;  // source prefix -> the layers stored under it
  std::vector<std::string> from_final_norm_;           // the final norm's prefix and its aliases
  std::string to_final_norm_;
};

}  // namespace plexus::cli

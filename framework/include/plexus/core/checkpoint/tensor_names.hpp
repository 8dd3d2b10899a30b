// The names one tensor may have in a checkpoint.
//
// Megatron-LM spells some of a decoder layer's tensors two ways. Its local layer spec keeps each
// pre-norm as a module of its own, as Plexus does:
//   decoder.layers.3.input_layernorm.weight
// Its Transformer Engine spec fuses the norm into the linear layer that follows it, which then
// holds the norm's weight and bias:
//   decoder.layers.3.self_attention.linear_qkv.layer_norm_weight
// Which tensors have a second spelling is the layer's knowledge, not the engine's: a layer
// declares it with the parameter (plx_param_spec.te_name, ABI 1.6). A checkpoint is written in one
// spelling (checkpoint.names) and read in either; loading also accepts the aliases the model's
// stack names (another stack's spelling of the final norm's prefix).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::checkpoint {

enum class NameStyle : std::uint8_t {
  local,  // Megatron's local spec: "...input_layernorm.weight" (the parameters' own names)
  te,     // Megatron's Transformer Engine spec: "...self_attention.linear_qkv.layer_norm_weight"
};

// "local" or "te" (the values of checkpoint.names); nullopt for anything else.
[[nodiscard]] std::optional<NameStyle> parse_name_style(std::string_view text) noexcept;
[[nodiscard]] std::string_view to_string(NameStyle style) noexcept;

struct TensorNames {
  std::string local;                 // the parameter's own name
  std::string te;                    // its Transformer Engine spelling; == local when it has one
  std::vector<std::string> aliases;  // other names loading accepts; never written

  // A tensor with one spelling and no alias.
  static TensorNames one(std::string name) { return {name, name, {}}; }
  [[nodiscard]] bool differ() const noexcept { return local != te; }
  [[nodiscard]] const std::string& in(NameStyle style) const noexcept {
    return style == NameStyle::te ? te : local;
  }
  // The names of a tensor derived from this one by a suffix ("<parameter>.exp_avg", an optimizer
  // moment): every name with the suffix.
  [[nodiscard]] TensorNames with_suffix(std::string_view suffix) const;
};

}  // namespace plexus::checkpoint

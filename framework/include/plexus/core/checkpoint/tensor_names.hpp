// The two spellings Megatron-LM gives some of a decoder layer's tensors in a checkpoint.
//
// Megatron's local layer spec keeps each pre-norm as a module of its own, as Plexus does:
//   decoder.layers.3.input_layernorm.weight
// Its Transformer Engine spec fuses the norm into the linear layer that follows it, which then
// holds the norm's weight and bias:
//   decoder.layers.3.self_attention.linear_qkv.layer_norm_weight
// Megatron maps one onto the other (the sharded_state_dict_keys_map of its local GPT layer
// spec); the table in tensor_names.cpp is the same mapping, the one place Plexus keeps it. A
// checkpoint is written in one spelling (checkpoint.names) and read in either.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace plexus::checkpoint {

enum class NameStyle : std::uint8_t {
  local,  // Megatron's local spec: "...input_layernorm.weight" (the parameters' own names)
  te,     // Megatron's Transformer Engine spec: "...self_attention.linear_qkv.layer_norm_weight"
};

// "local" or "te" (the values of checkpoint.names); nullopt for anything else.
[[nodiscard]] std::optional<NameStyle> parse_name_style(std::string_view text) noexcept;
[[nodiscard]] std::string_view to_string(NameStyle style) noexcept;

// A tensor's name in `style`. `name` is a parameter's name in either spelling, or a name derived
// from one by a suffix ("<parameter>.exp_avg", an optimizer moment). A name with only one
// spelling comes back unchanged.
[[nodiscard]] std::string spelled(std::string_view name, NameStyle style);

// Both spellings of a name; equal when it has only one.
struct Spellings {
  std::string local;
  std::string te;
  [[nodiscard]] bool differ() const noexcept { return local != te; }
};
[[nodiscard]] Spellings spellings(std::string_view name);

}  // namespace plexus::checkpoint

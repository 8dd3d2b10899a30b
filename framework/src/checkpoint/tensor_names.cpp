#include "plexus/core/checkpoint/tensor_names.hpp"

#include <array>
#include <cctype>

namespace plexus::checkpoint {

namespace {

// One tensor of a decoder layer with two spellings, relative to "decoder.layers.<i>.".
struct Respelling {
  std::string_view local;
  std::string_view te;
};

// Megatron's local GPT layer spec maps "input_layernorm." to "self_attention.linear_qkv.layer_norm_"
// and "pre_mlp_layernorm." to "mlp.linear_fc1.layer_norm_" (gpt_layer_specs.py); the bias
// exists under LayerNorm only. A Mamba layer's pre-norm: Megatron's local hybrid spec keeps it
// as "norm.weight" / "norm.bias", its TE spec fuses it into the mixer's input projection as
// "mixer.in_proj.layer_norm_weight" / "mixer.in_proj.layer_norm_bias".
constexpr std::array kLayerRespellings{
    Respelling{"input_layernorm.weight", "self_attention.linear_qkv.layer_norm_weight"},
    Respelling{"input_layernorm.bias", "self_attention.linear_qkv.layer_norm_bias"},
    Respelling{"pre_mlp_layernorm.weight", "mlp.linear_fc1.layer_norm_weight"},
    Respelling{"pre_mlp_layernorm.bias", "mlp.linear_fc1.layer_norm_bias"},
    Respelling{"norm.weight", "mixer.in_proj.layer_norm_weight"},
    Respelling{"norm.bias", "mixer.in_proj.layer_norm_bias"},
};

constexpr std::string_view kLayersPrefix = "decoder.layers.";

// The length of "decoder.layers.<digits>." at the start of name, or 0.
std::size_t layer_prefix_length(std::string_view name) {
  if (!name.starts_with(kLayersPrefix)) return 0;
  std::size_t i = kLayersPrefix.size();
  const std::size_t digits_start = i;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) != 0) ++i;
  if (i == digits_start || i >= name.size() || name[i] != '.') return 0;
  return i + 1;
}

// Whether rest is `form`, or `form` followed by a derived name's suffix (".exp_avg").
bool is_spelled_as(std::string_view rest, std::string_view form) {
  return rest.starts_with(form) && (rest.size() == form.size() || rest[form.size()] == '.');
}

}  // namespace

std::optional<NameStyle> parse_name_style(std::string_view text) noexcept {
  if (text == "local") return NameStyle::local;
  if (text == "te") return NameStyle::te;
  return std::nullopt;
}

std::string_view to_string(NameStyle style) noexcept {
  return style == NameStyle::te ? "te" : "local";
}

std::string spelled(std::string_view name, NameStyle style) {
  const std::size_t prefix = layer_prefix_length(name);
  if (prefix == 0) return std::string(name);
  const std::string_view rest = name.substr(prefix);
  for (const Respelling& r : kLayerRespellings) {
    for (const std::string_view form : {r.local, r.te}) {
      if (!is_spelled_as(rest, form)) continue;
      const std::string_view wanted = style == NameStyle::te ? r.te : r.local;
      return std::string(name.substr(0, prefix)).append(wanted).append(rest.substr(form.size()));
    }
  }
  return std::string(name);
}

Spellings spellings(std::string_view name) {
  return Spellings{spelled(name, NameStyle::local), spelled(name, NameStyle::te)};
}

}  // namespace plexus::checkpoint

#include "plexus/core/checkpoint/tensor_names.hpp"

namespace plexus::checkpoint {

std::optional<NameStyle> parse_name_style(std::string_view text) noexcept {
  if (text == "local") return NameStyle::local;
  if (text == "te") return NameStyle::te;
  return std::nullopt;
}

std::string_view to_string(NameStyle style) noexcept {
  return style == NameStyle::te ? "te" : "local";
}

TensorNames TensorNames::with_suffix(std::string_view suffix) const {
  TensorNames out{std::string(local).append(suffix), std::string(te).append(suffix), {}};
  for (const std::string& alias : aliases) out.aliases.push_back(std::string(alias).append(suffix));
  return out;
}

}  // namespace plexus::checkpoint

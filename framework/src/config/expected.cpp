// Schema::expected(): the "what was expected" half of validation messages.
#include "internal.hpp"

namespace plexus::config {

namespace {

std::string bound_text(const std::optional<NumericBound>& lo, const std::optional<NumericBound>& hi) {
  if (lo && hi) {
    // Interval notation reads naturally to ML engineers: "in [0, 1)".
    return std::string(" in ") + (lo->exclusive ? "(" : "[") + detail::format_number(lo->value) + ", " +
           detail::format_number(hi->value) + (hi->exclusive ? ")" : "]");
  }
  if (lo) return std::string(lo->exclusive ? " > " : " >= ") + detail::format_number(lo->value);
  if (hi) return std::string(hi->exclusive ? " < " : " <= ") + detail::format_number(hi->value);
  return {};
}

// "a", "a or b", "a, b or c".
std::string either(const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? " or " : ", ";
    out += parts[i];
  }
  return out;
}

}  // namespace

std::string Schema::expected() const {
  if (!enum_values().empty()) {
    std::string out = "one of ";
    for (std::size_t i = 0; i < enum_values().size(); ++i) {
      if (i > 0) out += ", ";
      out += detail::literal(enum_values()[i]);
    }
    return out;
  }
  if (allows_any_type()) return "any value";
  std::vector<std::string> parts;
  const std::string range = bound_text(minimum(), maximum());
  // "number" already accepts integers, so "an integer or a number" would be noise.
  if (allows(JsonType::number)) {
    parts.push_back("a number" + range);
  } else if (allows(JsonType::integer)) {
    parts.push_back("an integer" + range);
  }
  if (allows(JsonType::boolean)) parts.emplace_back("a boolean");
  if (allows(JsonType::string)) parts.emplace_back("a string");
  if (allows(JsonType::array)) parts.emplace_back("an array");
  if (allows(JsonType::object)) parts.emplace_back("an object");
  if (allows(JsonType::null)) parts.emplace_back("null");
  return either(parts);
}

}  // namespace plexus::config

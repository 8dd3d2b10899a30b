// find(): read-only lookup of a value by config path.
#include "internal.hpp"

namespace plexus::config {

const boost::json::value* find(const boost::json::value& root, std::string_view dotted_path) {
  if (dotted_path.empty()) return &root;
  const detail::ParsedPath parsed = detail::parse_path(dotted_path);
  if (!parsed.error.empty()) {
    // Paths given to find() come from code, not users: a bad one is a bug.
    throw std::invalid_argument("invalid config path '" + detail::printable(dotted_path, 200) +
                                "': " + parsed.error);
  }
  const boost::json::value* cur = &root;
  for (const detail::PathStep& step : parsed.steps) {
    const bool as_index = step.kind == detail::PathStep::Kind::index ||
                          (step.kind == detail::PathStep::Kind::numeric && cur->is_array());
    if (as_index) {
      if (!cur->is_array() || step.index >= cur->get_array().size()) return nullptr;
      cur = &cur->get_array()[step.index];
    } else {
      if (!cur->is_object()) return nullptr;
      cur = cur->get_object().if_contains(step.key);
      if (cur == nullptr) return nullptr;
    }
  }
  return cur;
}

}  // namespace plexus::config

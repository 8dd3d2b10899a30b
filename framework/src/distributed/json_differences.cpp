// Where two JSON documents differ, for the start-up check that every rank runs the same config:
// naming the key beats "configs differ".
#include <boost/json.hpp>

#include "plexus/core/distributed/runtime.hpp"

namespace plexus::distributed {
namespace {

std::string shown(const boost::json::value* v) {
  if (v == nullptr) return "(absent)";
  std::string text = boost::json::serialize(*v);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

void walk(const boost::json::value* a, const boost::json::value* b, const std::string& path,
          std::vector<std::string>& out, std::size_t limit) {
  if (out.size() >= limit) return;
  if (a != nullptr && b != nullptr && a->is_object() && b->is_object()) {
    for (const auto& [key, value] : a->as_object())
      walk(&value, b->as_object().if_contains(key),
           path.empty() ? std::string(key) : path + "." + std::string(key), out, limit);
    for (const auto& [key, value] : b->as_object())
      if (!a->as_object().contains(key))
        walk(nullptr, &value, path.empty() ? std::string(key) : path + "." + std::string(key), out, limit);
    return;
  }
  if (a != nullptr && b != nullptr && a->is_array() && b->is_array() &&
      a->as_array().size() == b->as_array().size()) {
    for (std::size_t i = 0; i < a->as_array().size(); ++i)
      walk(&a->as_array()[i], &b->as_array()[i], path + "[" + std::to_string(i) + "]", out, limit);
    return;
  }
  if (a == nullptr || b == nullptr || *a != *b)
    out.push_back((path.empty() ? std::string("(root)") : path) + ": " + shown(a) + " vs " + shown(b));
}

}  // namespace

std::vector<std::string> json_differences(const boost::json::value& a, const boost::json::value& b,
                                          std::size_t limit) {
  std::vector<std::string> out;
  walk(&a, &b, "", out, limit);
  return out;
}

}  // namespace plexus::distributed

// validate(): fills defaults and checks a config against a Schema, collecting
// every problem so users can fix a config file in one go.
#include "internal.hpp"

#include <algorithm>
#include <cmath>

namespace plexus::config {

namespace {

// Past this many problems the config is probably the wrong file entirely;
// listing hundreds of lines would bury the first ones.
constexpr std::size_t max_listed_problems = 50;

class Validator {
 public:
  void check(boost::json::value& v, const Schema& s, const std::string& path) {
    if (s.allows_any_type()) return;
    if (!s.accepts_kind(v)) {
      report(path, "expected " + s.expected() + ", got " + describe(v) + integer_hint(v, s));
      return;
    }
    if (!s.enum_values().empty() && !in_enum(v, s)) {
      report(path, "expected " + s.expected() + ", got " + detail::literal(v));
      return;
    }
    if (v.is_number() && !in_range(v, s)) {
      report(path, "expected " + s.expected() + ", got " + detail::literal(v));
      return;
    }
    if (v.is_object()) check_object(v.get_object(), s, path);
    if (v.is_array() && s.items() != nullptr) {
      auto& arr = v.get_array();
      for (std::size_t i = 0; i < arr.size(); ++i) check(arr[i], *s.items(), index_path(path, i));
    }
  }

  void throw_if_any() {
    if (problems_.empty()) return;
    if (dropped_ > 0) {
      problems_.push_back(
          {"", "... and " + std::to_string(dropped_) + " more problem" + (dropped_ == 1 ? "" : "s")});
    }
    throw ConfigError(std::move(problems_));
  }

 private:
  void report(const std::string& path, std::string message) {
    if (problems_.size() < max_listed_problems) {
      problems_.push_back({path, std::move(message)});
    } else {
      ++dropped_;
    }
  }

  // 4.0 and 1e6 are doubles in JSON; say why they are refused as integers.
  static std::string integer_hint(const boost::json::value& v, const Schema& s) {
    if (!v.is_double() || !s.allows(JsonType::integer) || s.allows(JsonType::number)) return {};
    const double d = v.get_double();
    if (!std::isfinite(d) || std::trunc(d) != d) return {};
    return " (write integers without a decimal point or exponent)";
  }

  static bool in_enum(const boost::json::value& v, const Schema& s) {
    const auto& allowed = s.enum_values();
    return std::any_of(allowed.begin(), allowed.end(),
                       [&](const boost::json::value& a) { return detail::json_equal(v, a); });
  }

  static bool in_range(const boost::json::value& v, const Schema& s) {
    if (const auto& lo = s.minimum()) {
      const int c = detail::compare_numbers(v, lo->value);
      if (lo->exclusive ? c <= 0 : c < 0) return false;
    }
    if (const auto& hi = s.maximum()) {
      const int c = detail::compare_numbers(v, hi->value);
      if (hi->exclusive ? c >= 0 : c > 0) return false;
    }
    return true;
  }

  static std::vector<std::string> property_names(const Schema& s) {
    std::vector<std::string> names;
    names.reserve(s.properties().size());
    for (const auto& p : s.properties()) names.push_back(p.name);
    return names;
  }

  static std::string unknown_key_message(std::string_view key, const Schema& s) {
    std::string message = "unknown key " + detail::quote_key(key);
    const std::vector<std::string> names = property_names(s);
    if (auto near = nearest(key, names)) return message + " (did you mean '" + *near + "'?)";
    if (names.empty()) return message + " (this object takes no keys)";
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return message + " (valid keys: " + list + ")";
  }

  void check_object(boost::json::object& obj, const Schema& s, const std::string& path) {
    // 1. Defaults first, so the filled values are checked like any other
    //    (nested defaults inside them get filled by the recursion below).
    for (const auto& p : s.properties()) {
      if (obj.contains(p.name)) continue;
      if (const boost::json::value* def = p.schema.default_value()) {
        obj.emplace(p.name, *def);
      } else if (p.schema.fillable()) {
        obj.emplace(p.name, boost::json::object());
      }
    }
    // 2. Every present key, in document order.
    for (auto& kv : obj) {
      const std::string_view key = kv.key();
      if (const Schema* ps = s.property(key)) {
        check(kv.value(), *ps, join_path(path, key));
      } else if (const Schema* extra = s.additional_properties_schema()) {
        check(kv.value(), *extra, join_path(path, key));
      } else if (!s.allows_additional_properties()) {
        report(path, unknown_key_message(key, s));
      }
    }
    // 3. Required keys still missing after defaults.
    for (const auto& name : s.required()) {
      if (obj.contains(name)) continue;
      std::string message = "missing required key " + detail::quote_key(name);
      if (const Schema* ps = s.property(name)) {
        message += ": expected " + ps->expected();
        if (!ps->doc().empty()) message += " (" + ps->doc() + ")";
      }
      report(path, std::move(message));
    }
  }

  std::vector<Problem> problems_;
  std::size_t dropped_ = 0;
};

}  // namespace

void validate(boost::json::value& node, const Schema& schema, std::string_view base_path) {
  Validator validator;
  validator.check(node, schema, std::string(base_path));
  validator.throw_if_any();
}

}  // namespace plexus::config

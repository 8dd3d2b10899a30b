// Command-line overrides: "path=value" assignments applied to a config.
#include "internal.hpp"

#include <boost/json/parse.hpp>

namespace plexus::config {

namespace {

constexpr std::size_t max_shown_override = 80;

std::string_view trim(std::string_view s) {
  const std::size_t first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// Context appended to every override message so the user sees which --set
// argument failed.
std::string in_override(std::string_view assignment) {
  return " (in override '" + detail::printable(assignment, max_shown_override) + "')";
}

// JSON if it parses, else the text itself as a string (see config.hpp). A key whose schema takes
// only strings gets the text itself unless it is a quoted JSON string: a layer pattern such as
// [*-][*-] would otherwise read as a broken JSON array.
boost::json::value parse_value(std::string_view text, std::string_view assignment, const std::string& path,
                               bool string_key) {
  boost::system::error_code ec;
  boost::json::value value = boost::json::parse(boost::json::string_view(text.data(), text.size()), ec);
  if (string_key && (ec || !value.is_string())) return boost::json::string(boost::json::string_view(text.data(), text.size()));
  if (!ec) {
    if (detail::find_non_finite(value, path)) {
      throw ConfigError(path, "number is too large to represent" + in_override(assignment));
    }
    return value;
  }
  const std::string_view stripped = trim(text);
  if (!stripped.empty() && (stripped.front() == '[' || stripped.front() == '{' || stripped.front() == '"')) {
    // Meant as JSON (an array, object or quoted string) but broken: taking it
    // as a plain string would only move the error to validation, obscured.
    throw ConfigError(path, "value '" + detail::printable(text, max_shown_override) +
                                "' looks like JSON but does not parse (" + ec.message() + ")" +
                                in_override(assignment));
  }
  // Not "return {...}": braces would pick boost::json::value's initializer-list
  // constructor and build an array.
  return boost::json::value(  // NOLINT(modernize-return-braced-init-list)
      boost::json::string_view(text.data(), text.size()));
}

// Walks root along steps (not empty), creating objects for missing keys, and
// stores value at the end. Throws ConfigError on the first step that cannot be taken.
void assign(boost::json::value& root, const std::vector<detail::PathStep>& steps, boost::json::value value,
            std::string_view assignment) {
  using Kind = detail::PathStep::Kind;
  boost::json::value* cur = &root;
  std::string path;      // path of *cur
  bool created = false;  // *cur was made up by this walk (it did not exist)
  for (const detail::PathStep& step : steps) {
    const bool as_index = step.kind == Kind::index || (step.kind == Kind::numeric && cur->is_array());
    if (as_index) {
      if (!cur->is_array()) {
        const std::string what = created ? "it does not exist (only existing arrays can be indexed)"
                                         : describe(*cur) + " is not an array";
        throw ConfigError(
            path, "cannot apply [" + std::to_string(step.index) + "]: " + what + in_override(assignment));
      }
      boost::json::array& arr = cur->get_array();
      if (step.index >= arr.size()) {
        throw ConfigError(path, "index " + std::to_string(step.index) + " is out of range for array of " +
                                    std::to_string(arr.size()) + in_override(assignment));
      }
      path = index_path(path, step.index);
      cur = &arr[step.index];
      created = false;
    } else {
      // Null means "not set": descending through it creates the object.
      if (cur->is_null()) cur->emplace_object();
      if (!cur->is_object()) {
        const std::string hint = cur->is_array() ? "; use an index such as [0]" : "";
        throw ConfigError(path, "cannot set key " + detail::quote_key(step.key) + " inside " +
                                    describe(*cur) + ", which is not an object" + hint +
                                    in_override(assignment));
      }
      boost::json::object& obj = cur->get_object();
      created = !obj.contains(step.key);
      path = join_path(path, step.key);
      cur = &obj[step.key];
    }
  }
  *cur = std::move(value);  // steps is never empty: parse_path rejects empty paths
}

// Whether the schema at a dotted path (object properties only) takes strings and nothing else.
bool string_only(const Schema* schema, const detail::ParsedPath& parsed) {
  for (const auto& step : parsed.steps) {
    if (schema == nullptr || step.kind == detail::PathStep::Kind::index) return false;
    schema = schema->property(step.key);
  }
  return schema != nullptr && schema->allows(JsonType::string) && !schema->allows(JsonType::array) &&
         !schema->allows(JsonType::object) && !schema->allows_any_type();
}

void apply_typed_override(boost::json::value& root, std::string_view assignment, const Schema* schema) {
  const std::size_t eq = detail::find_assignment(assignment);
  // The quotes are chars, not one-character literals: "'" + std::string&& trips a false
  // -Wrestrict of GCC 12 at -O3 inside libstdc++ (cmake/PlexusWarnings.cmake).
  const std::string shown = '\'' + detail::printable(assignment, max_shown_override) + '\'';
  if (eq == std::string_view::npos) {
    throw ConfigError("", "invalid override " + shown + ": expected <path>=<value>, e.g. train.lr=3e-4");
  }
  const std::string_view key = trim(assignment.substr(0, eq));
  if (key.empty()) throw ConfigError("", "invalid override " + shown + ": the path before '=' is empty");
  detail::ParsedPath parsed = detail::parse_path(key);
  if (!parsed.error.empty()) throw ConfigError("", "invalid override " + shown + ": " + parsed.error);

  boost::json::value value =
      parse_value(assignment.substr(eq + 1), assignment, std::string(key), string_only(schema, parsed));
  // Work on a copy so a failure part-way leaves root untouched (the walk may
  // already have created intermediate objects). Configs are small.
  boost::json::value updated = root;
  if (updated.is_null()) updated.emplace_object();
  if (!updated.is_object()) {
    throw ConfigError(
        "", "cannot apply override " + shown + ": the config is " + describe(updated) + ", not an object");
  }
  assign(updated, parsed.steps, std::move(value), assignment);
  root = std::move(updated);
}

}  // namespace

void apply_override(boost::json::value& root, std::string_view assignment) {
  apply_typed_override(root, assignment, nullptr);
}

void apply_overrides(boost::json::value& root, std::span<const std::string> assignments, const Schema* schema) {
  std::vector<Problem> problems;
  for (const std::string& assignment : assignments) {
    try {
      apply_typed_override(root, assignment, schema);
    } catch (const ConfigError& e) {
      problems.insert(problems.end(), e.problems().begin(), e.problems().end());
    }
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

}  // namespace plexus::config

// Plexus configuration: JSON loading, schema validation, command-line overrides.
//
// Every problem a user can cause is reported as a ConfigError naming the JSON
// path involved and what was expected, so a run fails before training starts
// with a message that says exactly which line of which config to fix.
//
// Paths
//   A config path is written with '.' between object keys and [N] for array
//   elements: "model.layers[2].hidden_size". Keys that are empty or contain
//   characters that would make the path ambiguous ('.', '[', ']', '"', '=',
//   whitespace, control characters) are written as ["key"] with JSON string
//   escaping: model["weird.key"]. join_path() produces this form and every
//   function taking a path (apply_override, find) accepts it. In overrides and
//   find(), an all-digit segment ("model.layers.1") is an array index when the
//   value at that point is an array and an object key otherwise, so both
//   "layers[1]" and "layers.1" work.
//
// Numbers
//   "integer" accepts JSON numbers written without a fraction or exponent
//   (parsed by Boost.JSON as int64 or uint64). A number written as 4.0 or 1e6
//   is a double and is NOT an integer: the error says so and tells the user to
//   drop the decimal point or exponent. We refuse to guess because a config
//   that says 1e6 where a count is expected is more often a mistake than not,
//   and silently rounding would hide it. "number" accepts all three kinds.
//   Numbers that overflow a double (1e999) are rejected when parsing.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::config {

// One problem found in a config: where (a config path, "" for the whole
// document or for problems not tied to a path) and what.
struct Problem {
  std::string path;
  std::string message;
};

// Thrown for every config problem. what() is a complete, user-facing message:
//   "config error at <path>: <message>"   or   "config error: <message>"
// When several problems are reported together (validation collects them all),
// what() has one such line per problem, path() is the first problem's path and
// detail() is what() without the first line's "config error at <path>: " prefix,
// so what() == prefix(path()) + detail() always holds.
// Copying never throws: the data is shared, as exceptions are copied while
// unwinding.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string path, std::string message);
  // Precondition: problems is not empty (an empty list is reported as one
  // generic problem rather than breaking the invariants above).
  explicit ConfigError(std::vector<Problem> problems);

  [[nodiscard]] const std::string& path() const noexcept;               // e.g. "model.layers[2].hidden_size"
  [[nodiscard]] const std::string& detail() const noexcept;             // message without the path prefix
  [[nodiscard]] const std::vector<Problem>& problems() const noexcept;  // at least one

 private:
  struct Data;
  static std::shared_ptr<const Data> make_data(std::vector<Problem> problems);
  explicit ConfigError(std::shared_ptr<const Data> data);
  std::shared_ptr<const Data> data_;
};

// ---------------------------------------------------------------- loading ---

// Reads and parses a JSON file. Errors name the file: it does not exist, is
// not a regular file, cannot be read, or does not parse. Parse errors read
// "<file>:<line>:<column>: <message>" followed by the offending line and a
// caret. Comments and trailing commas are accepted; a UTF-8 byte order mark is
// skipped; duplicate keys in one object are an error (JSON would silently keep
// the last one, which hides edits made to the first).
boost::json::value load_file(const std::filesystem::path& file);

// Same as load_file for text already in memory; origin names the source in
// messages, e.g. "<embedded default>" or "--config-json".
boost::json::value parse_text(std::string_view text, std::string_view origin);

// -------------------------------------------------------------- overrides ---

// Applies one "path=value" assignment (a --set argument) to root.
// - The path uses the syntax described at the top of this file.
// - The value is parsed as JSON if it parses (numbers, true/false/null,
//   arrays, objects, "quoted strings"), otherwise it is taken verbatim as a
//   plain string: lr=3e-4 is a number, name=run1 is a string, tag="12" is the
//   string 12. A value that starts with '[', '{' or '"' but does not parse is
//   an error rather than a string, since it was almost certainly meant as JSON.
// - Intermediate objects are created when missing; an intermediate null is
//   replaced by an object (null conventionally means "not set").
// - Array elements must already exist: indexing past the end is an error.
// - root itself may be null (an empty config); it becomes an object.
// Errors (ConfigError): missing '=', empty key, empty path segment or malformed
// index, indexing a non-array, index out of range, descending into a scalar.
// On error root is left unchanged.
void apply_override(boost::json::value& root, std::string_view assignment);

// Applies every assignment in order. All failing assignments are reported in
// one ConfigError; the successful ones are still applied.
// With a schema, a key that takes only strings gets the value's text as it is (unless it is a
// quoted JSON string): --set model.pattern=[*-][*-] needs no quotes.
class Schema;
void apply_overrides(boost::json::value& root, std::span<const std::string> assignments,
                     const Schema* schema = nullptr);

// ----------------------------------------------------------------- schema ---

// The JSON types a schema can name. Bit flags so a schema can allow several.
enum class JsonType : std::uint8_t {
  null = 1U << 0U,
  boolean = 1U << 1U,
  integer = 1U << 2U,
  number = 1U << 3U,  // a schema allowing "number" allows integers as well
  string = 1U << 4U,
  array = 1U << 5U,
  object = 1U << 6U,
};

// A bound on numbers: "minimum"/"maximum" are inclusive,
// "exclusive_minimum"/"exclusive_maximum" are not.
struct NumericBound {
  boost::json::value value;  // int64, uint64 or double
  bool exclusive = false;
};

struct SchemaProperty;

// A parsed schema: a small subset of JSON Schema written as JSON text.
//   { "type": "object", "doc": "...",
//     "properties": { "<key>": <schema>, ... },
//     "required": ["key", ...],
//     "additional_properties": false | true | <schema>,    // default false
//     "component_kind": "layer" }   // a component section, see component_kind()
//   { "type": "integer"|"number"|"boolean"|"string"|"array"|"object"|"null"|"any",
//     "default": <value>, "minimum": x, "maximum": y,
//     "exclusive_minimum": x, "exclusive_maximum": y,
//     "enum": [...], "items": <schema>, "doc": "..." }
// "type" is required and may be an array of type names ("any" alone only).
// Keywords must fit the type ("items" needs "array", bounds need a numeric
// type, ...), "default" and "enum" values must themselves be valid, and
// unknown keywords are errors, so a typo in a plugin's schema is caught when
// the plugin loads rather than silently ignored.
// Malformed schemas throw std::invalid_argument naming the origin and the path
// inside the schema document (these are programmer errors in plugins).
// Schemas are immutable; copies share their data and may be used from any
// thread.
class Schema {
 public:
  // A schema that accepts any value (for components that declare none).
  Schema();

  static Schema parse(std::string_view json_text, std::string_view origin);
  static Schema from_json(const boost::json::value& schema, std::string_view origin);

  [[nodiscard]] bool allows(JsonType type) const noexcept;
  [[nodiscard]] bool allows_any_type() const noexcept;
  // Type check only (no bounds, enum or properties): does v's JSON kind fit?
  [[nodiscard]] bool accepts_kind(const boost::json::value& v) const noexcept;

  [[nodiscard]] const std::string& doc() const noexcept;
  [[nodiscard]] const std::string& origin() const noexcept;
  [[nodiscard]] const boost::json::value* default_value() const noexcept;  // nullptr: none
  [[nodiscard]] const boost::json::array& enum_values() const noexcept;    // empty: no enum
  [[nodiscard]] const std::optional<NumericBound>& minimum() const noexcept;
  [[nodiscard]] const std::optional<NumericBound>& maximum() const noexcept;
  [[nodiscard]] const Schema* items() const noexcept;  // nullptr: items unconstrained
  [[nodiscard]] const std::vector<SchemaProperty>& properties() const noexcept;  // declaration order
  [[nodiscard]] const Schema* property(std::string_view name) const noexcept;
  [[nodiscard]] const std::vector<std::string>& required() const noexcept;
  // Unknown keys are accepted (additional_properties true or a schema).
  [[nodiscard]] bool allows_additional_properties() const noexcept;
  // Schema unknown keys must satisfy; nullptr when true/false.
  [[nodiscard]] const Schema* additional_properties_schema() const noexcept;
  // The kind ("layer", "scheduler", ...) of the component an object of this schema names, or empty.
  // "component_kind" marks a component section, {"component": NAME, "options": {...}} (both
  // properties must be declared): validate() treats it as any object, and the run config's checks
  // look the component up once the plugins are loaded and validate "options" against its schema.
  [[nodiscard]] const std::string& component_kind() const noexcept;
  // True for an object-only schema that validation creates when it is missing
  // because its properties have defaults and nothing required lacks one.
  [[nodiscard]] bool fillable() const noexcept;

  // What a value must be, for messages: "an integer >= 1", "a number in (0, 1]",
  // "one of \"gelu\", \"swiglu\"", "a string or null", "any value".
  [[nodiscard]] std::string expected() const;

 private:
  friend class SchemaParser;
  struct Node;
  explicit Schema(std::shared_ptr<const Node> node);
  std::shared_ptr<const Node> node_;
};

struct SchemaProperty {
  std::string name;
  Schema schema;
};

// Validates node against schema in place.
// 1. Missing keys with a "default" get a copy of it; missing fillable objects
//    are created (so nested defaults appear).
// 2. Types, bounds, enums, required keys and unknown keys are checked,
//    recursively through properties, array items and additional_properties.
// All problems are collected and thrown as one ConfigError (at most 50 are
// listed, then a count of the rest), in document order, then missing required
// keys. base_path is the path of node inside the whole config, used in messages.
// Unknown keys get a "did you mean" suggestion when one is close, otherwise
// the list of valid keys.
void validate(boost::json::value& node, const Schema& schema, std::string_view base_path = "");

// ---------------------------------------------------------------- helpers ---

// "" + "a" = "a"; "a" + "b" = "a.b"; "a" + "x.y" = a["x.y"] (see Paths above).
[[nodiscard]] std::string join_path(std::string_view base, std::string_view key);
// "a" + 3 = "a[3]"; "" + 3 = "[3]".
[[nodiscard]] std::string index_path(std::string_view base, std::size_t index);

// A short description for messages: "number 3", "number 3.5", "number 4.0",
// "string \"x\"", "object", "array of 2", "true", "false", "null".
// Long strings are shortened.
[[nodiscard]] std::string describe(const boost::json::value& v);

// The candidate closest to key by case-insensitive Damerau-Levenshtein
// (optimal string alignment) distance, if it is close enough to be a likely
// typo: distance <= max(2, key length / 3) and smaller than the candidate's
// length. Ties go to the earlier candidate.
[[nodiscard]] std::optional<std::string> nearest(std::string_view key,
                                                 const std::vector<std::string>& candidates);

// ----------------------------------------------------------- typed access ---

// The value at a path (syntax above) or nullptr when any part is absent or the
// path runs into a value of the wrong kind. "" is root itself. A malformed
// path (e.g. "a..b") is a programming error: std::invalid_argument.
[[nodiscard]] const boost::json::value* find(const boost::json::value& root, std::string_view dotted_path);

// obj[key] as a given type. (Not [[nodiscard]]: calling one only to check a
// key is valid is legitimate.) obj_path is obj's path, used in messages.
// Throws ConfigError at join_path(obj_path, key) when the key is missing or
// the value has the wrong type. get_int accepts int64 and uint64 values that
// fit in int64; get_number accepts any JSON number.
std::int64_t get_int(const boost::json::object& obj, std::string_view key, std::string_view obj_path);
double get_number(const boost::json::object& obj, std::string_view key, std::string_view obj_path);
bool get_bool(const boost::json::object& obj, std::string_view key, std::string_view obj_path);
std::string get_string(const boost::json::object& obj, std::string_view key, std::string_view obj_path);

}  // namespace plexus::config

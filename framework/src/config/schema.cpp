// Parsing schemas (JSON text written by plugin authors) into Schema trees.
// Every mistake is a std::invalid_argument naming the place in the schema
// document, because it is the plugin author, not the user, who must fix it.
#include "internal.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <utility>

namespace plexus::config {

namespace {

constexpr unsigned all_types = 0x7FU;

struct TypeName {
  std::string_view name;
  JsonType type;
};
constexpr std::array<TypeName, 7> type_names{{
    {"null", JsonType::null},
    {"boolean", JsonType::boolean},
    {"integer", JsonType::integer},
    {"number", JsonType::number},
    {"string", JsonType::string},
    {"array", JsonType::array},
    {"object", JsonType::object},
}};

constexpr unsigned bit(JsonType t) {
  return static_cast<unsigned>(t);
}

const std::vector<std::string>& keywords() {
  static const std::vector<std::string> names{
      "type",          "doc",        "default",           "enum",
      "minimum",       "maximum",    "exclusive_minimum", "exclusive_maximum",
      "items",         "properties", "required",          "additional_properties",
      "component_kind"};
  return names;
}

std::vector<std::string> type_name_list() {
  std::vector<std::string> out{"any"};
  for (const auto& t : type_names) out.emplace_back(t.name);
  return out;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// " (did you mean 'x'?)" or " (expected one of: a, b, c)".
std::string suggestion(std::string_view word, const std::vector<std::string>& valid) {
  if (auto near = nearest(word, valid)) return " (did you mean '" + *near + "'?)";
  return " (expected one of: " + join_names(valid) + ")";
}

}  // namespace

struct Schema::Node {
  unsigned types = all_types;
  bool any = true;  // "any": no further checks apply
  std::string doc;
  std::string origin;
  std::optional<boost::json::value> default_value;
  boost::json::array enum_values;
  std::optional<NumericBound> minimum;
  std::optional<NumericBound> maximum;
  std::optional<Schema> items;
  std::vector<SchemaProperty> properties;
  std::vector<std::string> required;
  bool additional = false;
  std::optional<Schema> additional_schema;
  std::string component_kind;
  bool fillable = false;
};

// Builds Schema nodes from JSON; a class so it can reach Schema's private
// constructor (it is Schema's friend).
class SchemaParser {
  using Node = Schema::Node;

 public:
  explicit SchemaParser(std::string_view origin) : origin_(origin) {}

  [[nodiscard]] Schema parse(const boost::json::value& v, const std::string& at) const {
    if (!v.is_object()) fail(at, "expected a schema object, got " + describe(v));
    const boost::json::object& obj = v.get_object();
    for (const auto& kv : obj) {
      const std::string_view key = kv.key();
      if (std::find(keywords().begin(), keywords().end(), key) == keywords().end()) {
        fail(join_path(at, key),
             "unknown schema keyword " + detail::quote_key(key) + suggestion(key, keywords()));
      }
    }
    auto node = std::make_shared<Node>();
    node->origin = origin_;
    parse_type(obj, at, *node);
    if (const auto* doc = obj.if_contains("doc")) {
      if (!doc->is_string()) fail(join_path(at, "doc"), "expected a string, got " + describe(*doc));
      node->doc = std::string(doc->get_string());
    }
    if (node->any) {
      // "any" accepts everything, so constraints would be contradictions.
      for (const auto& kv : obj) {
        if (kv.key() != "type" && kv.key() != "doc" && kv.key() != "default") {
          fail(join_path(at, kv.key()),
               "keyword " + detail::quote_key(kv.key()) + " cannot be used with type \"any\"");
        }
      }
    }
    parse_bounds(obj, at, *node);
    parse_items(obj, at, *node);
    parse_object_keywords(obj, at, *node);
    parse_component_kind(obj, at, *node);
    parse_enum(obj, at, node);
    parse_default(obj, at, node);
    node->fillable = compute_fillable(*node);
    return Schema(std::move(node));
  }

 private:
  [[noreturn]] void fail(const std::string& at, const std::string& message) const {
    throw std::invalid_argument("invalid schema in " + origin_ + (at.empty() ? "" : " at " + at) + ": " +
                                message);
  }

  void require_type(const Node& node, JsonType type, const std::string& at, std::string_view keyword) const {
    if ((node.types & bit(type)) == 0) {
      fail(at, "keyword " + detail::quote_key(keyword) + " needs a type that includes \"" +
                   std::string(type_names[static_cast<std::size_t>(std::countr_zero(bit(type)))].name) +
                   "\"");
    }
  }

  [[nodiscard]] unsigned type_bit(const boost::json::value& name, const std::string& at) const {
    if (!name.is_string()) fail(at, "expected a type name (string), got " + describe(name));
    const std::string_view n = name.get_string();
    for (const auto& t : type_names) {
      if (t.name == n) return bit(t.type);
    }
    if (n == "any") return all_types;
    fail(at, "unknown type " + detail::quote_key(n) + suggestion(n, type_name_list()));
  }

  void parse_type(const boost::json::object& obj, const std::string& at, Node& node) const {
    const boost::json::value* type = obj.if_contains("type");
    const std::string type_at = join_path(at, "type");
    if (type == nullptr) fail(at, "missing \"type\" (one of: " + join_names(type_name_list()) + ")");
    if (type->is_string()) {
      node.types = type_bit(*type, type_at);
      node.any = type->get_string() == "any";
      return;
    }
    if (!type->is_array() || type->get_array().empty()) {
      fail(type_at, "expected a type name or a non-empty array of type names, got " + describe(*type));
    }
    node.types = 0;
    node.any = false;
    const auto& names = type->get_array();
    for (std::size_t i = 0; i < names.size(); ++i) {
      const unsigned b = type_bit(names[i], index_path(type_at, i));
      if (b == all_types) fail(index_path(type_at, i), "\"any\" cannot be combined with other types");
      if ((node.types & b) != 0) fail(index_path(type_at, i), "type listed twice");
      node.types |= b;
    }
  }

  void parse_bounds(const boost::json::object& obj, const std::string& at, Node& node) const {
    auto bound = [&](std::string_view inclusive, std::string_view exclusive) -> std::optional<NumericBound> {
      const boost::json::value* in = obj.if_contains(inclusive);
      const boost::json::value* ex = obj.if_contains(exclusive);
      if (in != nullptr && ex != nullptr) {
        fail(join_path(at, exclusive), "cannot be combined with " + detail::quote_key(inclusive));
      }
      if (in == nullptr && ex == nullptr) return std::nullopt;
      const std::string_view keyword = in != nullptr ? inclusive : exclusive;
      const boost::json::value& v = in != nullptr ? *in : *ex;
      const std::string key_at = join_path(at, keyword);
      if (!v.is_number()) fail(key_at, "expected a number, got " + describe(v));
      if ((node.types & (bit(JsonType::integer) | bit(JsonType::number))) == 0) {
        fail(key_at, "keyword " + detail::quote_key(keyword) + R"( needs type "integer" or "number")");
      }
      return NumericBound{v, ex != nullptr};
    };
    node.minimum = bound("minimum", "exclusive_minimum");
    node.maximum = bound("maximum", "exclusive_maximum");
    if (node.minimum && node.maximum) {
      const int c = detail::compare_numbers(node.minimum->value, node.maximum->value);
      const bool open = node.minimum->exclusive || node.maximum->exclusive;
      if (c > 0 || (c == 0 && open)) fail(at, "the minimum is above the maximum: no value is allowed");
    }
  }

  void parse_items(const boost::json::object& obj, const std::string& at, Node& node) const {
    const boost::json::value* items = obj.if_contains("items");
    if (items == nullptr) return;
    const std::string items_at = join_path(at, "items");
    require_type(node, JsonType::array, items_at, "items");
    node.items = parse(*items, items_at);
  }

  void parse_object_keywords(const boost::json::object& obj, const std::string& at, Node& node) const {
    if (const auto* props = obj.if_contains("properties")) {
      const std::string props_at = join_path(at, "properties");
      require_type(node, JsonType::object, props_at, "properties");
      if (!props->is_object())
        fail(props_at, "expected an object mapping keys to schemas, got " + describe(*props));
      for (const auto& kv : props->get_object()) {
        node.properties.push_back({std::string(kv.key()), parse(kv.value(), join_path(props_at, kv.key()))});
      }
    }
    if (const auto* extra = obj.if_contains("additional_properties")) {
      const std::string extra_at = join_path(at, "additional_properties");
      require_type(node, JsonType::object, extra_at, "additional_properties");
      if (extra->is_bool()) {
        node.additional = extra->get_bool();
      } else if (extra->is_object()) {
        node.additional = true;
        node.additional_schema = parse(*extra, extra_at);
      } else {
        fail(extra_at, "expected true, false or a schema object, got " + describe(*extra));
      }
    }
    if (const auto* required = obj.if_contains("required")) {
      const std::string req_at = join_path(at, "required");
      require_type(node, JsonType::object, req_at, "required");
      if (!required->is_array()) fail(req_at, "expected an array of key names, got " + describe(*required));
      const auto& names = required->get_array();
      for (std::size_t i = 0; i < names.size(); ++i) {
        const std::string name_at = index_path(req_at, i);
        if (!names[i].is_string()) fail(name_at, "expected a key name (string), got " + describe(names[i]));
        std::string name(names[i].get_string());
        if (std::find(node.required.begin(), node.required.end(), name) != node.required.end()) {
          fail(name_at, "key " + detail::quote_key(name) + " listed twice");
        }
        const bool declared = std::any_of(node.properties.begin(), node.properties.end(),
                                          [&](const SchemaProperty& p) { return p.name == name; });
        // With additional_properties false an undeclared required key could
        // never be valid, so it must be a typo.
        if (!declared && !node.additional) {
          std::vector<std::string> declared_names;
          for (const auto& p : node.properties) declared_names.push_back(p.name);
          fail(name_at, "required key " + detail::quote_key(name) + " is not in \"properties\"" +
                            (declared_names.empty() ? std::string() : suggestion(name, declared_names)));
        }
        node.required.push_back(std::move(name));
      }
    }
  }

  // A component section: {"component": NAME, "options": {...}}. Which kind names are valid is the
  // plugin host's business; here only the shape that makes the annotation usable is checked.
  void parse_component_kind(const boost::json::object& obj, const std::string& at, Node& node) const {
    const boost::json::value* kind = obj.if_contains("component_kind");
    if (kind == nullptr) return;
    const std::string kind_at = join_path(at, "component_kind");
    if (!kind->is_string() || kind->get_string().empty())
      fail(kind_at, "expected a component kind name (string), got " + describe(*kind));
    if (node.types != bit(JsonType::object))
      fail(kind_at, R"(keyword 'component_kind' needs type "object" alone)");
    const auto declared = [&](std::string_view name, JsonType type) {
      return std::any_of(node.properties.begin(), node.properties.end(), [&](const SchemaProperty& p) {
        return p.name == name && !p.schema.allows_any_type() && p.schema.allows(type);
      });
    };
    if (!declared("component", JsonType::string) || !declared("options", JsonType::object))
      fail(kind_at,
           R"(a component section declares the properties "component" (a string) and "options" (an object))");
    node.component_kind = std::string(kind->get_string());
  }

  // Enum entries must satisfy the rest of the schema, or they could never be chosen.
  void parse_enum(const boost::json::object& obj, const std::string& at,
                  const std::shared_ptr<Node>& node) const {
    const boost::json::value* values = obj.if_contains("enum");
    if (values == nullptr) return;
    const std::string enum_at = join_path(at, "enum");
    if (!values->is_array() || values->get_array().empty()) {
      fail(enum_at, "expected a non-empty array of allowed values, got " + describe(*values));
    }
    const Schema without_enum(node);
    const auto& arr = values->get_array();
    for (std::size_t i = 0; i < arr.size(); ++i) {
      check_against(arr[i], without_enum, index_path(enum_at, i), "enum value");
    }
    node->enum_values = arr;
  }

  // The default is validated (and its own nested defaults filled) once here,
  // so validation can insert it without checking it again.
  void parse_default(const boost::json::object& obj, const std::string& at,
                     const std::shared_ptr<Node>& node) const {
    const boost::json::value* def = obj.if_contains("default");
    if (def == nullptr) return;
    node->default_value = check_against(*def, Schema(node), join_path(at, "default"), "default");
  }

  boost::json::value check_against(const boost::json::value& v, const Schema& schema, const std::string& at,
                                   std::string_view what) const {
    boost::json::value copy = v;
    try {
      validate(copy, schema);
    } catch (const ConfigError& e) {
      const Problem& p = e.problems().front();
      fail(at, std::string(what) + " " + detail::literal(v) + " does not match the schema: " +
                   (p.path.empty() ? "" : "at " + p.path + ": ") + p.message);
    }
    return copy;
  }

  // An object worth creating when absent: only an object is allowed, some
  // property has a default (directly or further down), and nothing required
  // would be left missing.
  static bool compute_fillable(const Node& node) {
    if (node.types != bit(JsonType::object)) return false;
    bool any_default = false;
    for (const auto& p : node.properties) {
      any_default = any_default || p.schema.default_value() != nullptr || p.schema.fillable();
    }
    for (const auto& name : node.required) {
      const auto it = std::find_if(node.properties.begin(), node.properties.end(),
                                   [&](const SchemaProperty& p) { return p.name == name; });
      if (it == node.properties.end()) return false;
      if (it->schema.default_value() == nullptr && !it->schema.fillable()) return false;
    }
    return any_default;
  }

  std::string origin_;
};

Schema::Schema() {
  // One shared "any" node: default-constructed schemas are common and cheap.
  static const std::shared_ptr<const Node> any = std::make_shared<const Node>();
  node_ = any;
}

Schema::Schema(std::shared_ptr<const Node> node) : node_(std::move(node)) {}

Schema Schema::parse(std::string_view json_text, std::string_view origin) {
  boost::json::value doc;
  try {
    doc = parse_text(json_text, origin);
  } catch (const ConfigError& e) {
    throw std::invalid_argument("invalid schema in " + std::string(origin) + ": " + e.detail());
  }
  return from_json(doc, origin);
}

Schema Schema::from_json(const boost::json::value& schema, std::string_view origin) {
  return SchemaParser(origin).parse(schema, "");
}

bool Schema::allows(JsonType type) const noexcept {
  return (node_->types & bit(type)) != 0;
}
bool Schema::allows_any_type() const noexcept {
  return node_->any;
}

bool Schema::accepts_kind(const boost::json::value& v) const noexcept {
  switch (v.kind()) {
    case boost::json::kind::null:
      return allows(JsonType::null);
    case boost::json::kind::bool_:
      return allows(JsonType::boolean);
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
      return allows(JsonType::integer) || allows(JsonType::number);
    case boost::json::kind::double_:
      return allows(JsonType::number);
    case boost::json::kind::string:
      return allows(JsonType::string);
    case boost::json::kind::array:
      return allows(JsonType::array);
    case boost::json::kind::object:
      return allows(JsonType::object);
  }
  return false;
}

const std::string& Schema::doc() const noexcept {
  return node_->doc;
}
const std::string& Schema::origin() const noexcept {
  return node_->origin;
}
const boost::json::value* Schema::default_value() const noexcept {
  return node_->default_value ? &*node_->default_value : nullptr;
}
const boost::json::array& Schema::enum_values() const noexcept {
  return node_->enum_values;
}
const std::optional<NumericBound>& Schema::minimum() const noexcept {
  return node_->minimum;
}
const std::optional<NumericBound>& Schema::maximum() const noexcept {
  return node_->maximum;
}
const Schema* Schema::items() const noexcept {
  return node_->items ? &*node_->items : nullptr;
}
const std::vector<SchemaProperty>& Schema::properties() const noexcept {
  return node_->properties;
}
const Schema* Schema::property(std::string_view name) const noexcept {
  for (const auto& p : node_->properties) {
    if (p.name == name) return &p.schema;
  }
  return nullptr;
}
const std::vector<std::string>& Schema::required() const noexcept {
  return node_->required;
}
bool Schema::allows_additional_properties() const noexcept {
  return node_->additional;
}
const Schema* Schema::additional_properties_schema() const noexcept {
  return node_->additional_schema ? &*node_->additional_schema : nullptr;
}
const std::string& Schema::component_kind() const noexcept {
  return node_->component_kind;
}
bool Schema::fillable() const noexcept {
  return node_->fillable;
}

}  // namespace plexus::config

// JsonFields: typed tokenizer.json reads with messages naming the file and the field.
#include <cstdio>
#include <limits>

#include "data/tokenizer_json_fields.hpp"
#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {

void JsonFields::fail(const std::string& path, const std::string& message) const {
  throw DataError(source_, source_ + ": " + path + ": " + message);
}

std::string JsonFields::show(const boost::json::value& value) {
  if (value.is_double()) {  // 0.1, not Boost's 1E-1
    char number[32];
    std::snprintf(number, sizeof number, "%g", value.get_double());
    return number;
  }
  std::string text = boost::json::serialize(value);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

const boost::json::object& JsonFields::object(const boost::json::value& value,
                                              const std::string& path) const {
  if (!value.is_object()) fail(path, "expected an object, got " + show(value));
  return value.get_object();
}

const boost::json::array& JsonFields::array(const boost::json::value& value, const std::string& path) const {
  if (!value.is_array()) fail(path, "expected an array, got " + show(value));
  return value.get_array();
}

std::string JsonFields::string(const boost::json::value& value, const std::string& path) const {
  if (!value.is_string()) fail(path, "expected a string, got " + show(value));
  return std::string(value.get_string());
}

bool JsonFields::boolean(const boost::json::value& value, const std::string& path) const {
  if (!value.is_bool()) fail(path, "expected true or false, got " + show(value));
  return value.get_bool();
}

int32_t JsonFields::id(const boost::json::value& value, const std::string& path) const {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (value.is_int64() && value.get_int64() >= 0 && value.get_int64() <= kMax)
    return static_cast<int32_t>(value.get_int64());
  if (value.is_uint64() && value.get_uint64() <= static_cast<uint64_t>(kMax))
    return static_cast<int32_t>(value.get_uint64());
  fail(path, "expected a token id (an integer from 0 to " + std::to_string(kMax) + "), got " + show(value));
}

const boost::json::value* JsonFields::find(const boost::json::object& object, std::string_view key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &it->value();
}

const boost::json::value& JsonFields::require(const boost::json::object& object, std::string_view key,
                                              const std::string& path) const {
  const boost::json::value* value = find(object, key);
  if (value == nullptr) fail(path, "missing field \"" + std::string(key) + "\"");
  return *value;
}

bool JsonFields::boolean_or(const boost::json::object& object, std::string_view key, const std::string& path,
                            bool fallback) const {
  const boost::json::value* value = find(object, key);
  if (value == nullptr || value->is_null()) return fallback;
  return boolean(*value, path + "." + std::string(key));
}

std::string JsonFields::string_or_empty(const boost::json::object& object, std::string_view key,
                                        const std::string& path) const {
  const boost::json::value* value = find(object, key);
  if (value == nullptr || value->is_null()) return "";
  return string(*value, path + "." + std::string(key));
}

std::string JsonFields::type_of(const boost::json::object& object, const std::string& path) const {
  return string(require(object, "type", path), path + ".type");
}

}  // namespace plexus::data

// Typed getters that report missing or mistyped keys by config path.
#include "internal.hpp"

#include <limits>

namespace plexus::config {

namespace {

const boost::json::value& require(const boost::json::object& obj, std::string_view key,
                                  std::string_view obj_path, std::string_view expected) {
  if (const boost::json::value* v = obj.if_contains(key)) return *v;
  throw ConfigError(join_path(obj_path, key),
                    "required key is missing (expected " + std::string(expected) + ")");
}

[[noreturn]] void wrong_type(const boost::json::value& v, std::string_view key, std::string_view obj_path,
                             std::string_view expected) {
  throw ConfigError(join_path(obj_path, key), "expected " + std::string(expected) + ", got " + describe(v));
}

}  // namespace

std::int64_t get_int(const boost::json::object& obj, std::string_view key, std::string_view obj_path) {
  const boost::json::value& v = require(obj, key, obj_path, "an integer");
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64()) {
    if (v.get_uint64() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return static_cast<std::int64_t>(v.get_uint64());
    }
    wrong_type(v, key, obj_path, "an integer <= " + std::to_string(std::numeric_limits<std::int64_t>::max()));
  }
  wrong_type(v, key, obj_path, "an integer");
}

double get_number(const boost::json::object& obj, std::string_view key, std::string_view obj_path) {
  const boost::json::value& v = require(obj, key, obj_path, "a number");
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  if (v.is_double()) return v.get_double();
  wrong_type(v, key, obj_path, "a number");
}

bool get_bool(const boost::json::object& obj, std::string_view key, std::string_view obj_path) {
  const boost::json::value& v = require(obj, key, obj_path, "a boolean");
  if (v.is_bool()) return v.get_bool();
  wrong_type(v, key, obj_path, "a boolean");
}

std::string get_string(const boost::json::object& obj, std::string_view key, std::string_view obj_path) {
  const boost::json::value& v = require(obj, key, obj_path, "a string");
  if (v.is_string()) return std::string(v.get_string());
  wrong_type(v, key, obj_path, "a string");
}

}  // namespace plexus::config

// Typed config access for plugins. Errors name the full JSON path, as ConfigError does.
#include <boost/json/serialize.hpp>
#include <string>

#include "host_services/config_access.hpp"
#include "host_services/host_functions.hpp"
#include "host_services/last_error.hpp"
#include "plexus/core/config.hpp"

namespace plexus::detail {
namespace {

// Finds `key` in the object `node`; on failure reports the error and returns nullptr.
const boost::json::value* lookup(plx_config node, const char* key, plx_status& status) {
  if (node == nullptr || key == nullptr) {
    status = fail(PLX_ERR_INVALID_ARGUMENT, "config access with a null node or key");
    return nullptr;
  }
  const boost::json::value* value = config_value(node);
  const std::string& path = config_node_path(node);
  if (!value->is_object()) {
    status = fail(PLX_ERR_INVALID_ARGUMENT,
                  "config error at " + path + ": expected an object, got " + config::describe(*value));
    return nullptr;
  }
  const boost::json::value* found = value->as_object().if_contains(key);
  if (found == nullptr) {
    status = fail(PLX_ERR_NOT_FOUND, "config error at " + config::join_path(path, key) + ": missing");
    return nullptr;
  }
  status = PLX_OK;
  return found;
}

plx_status type_error(plx_config node, const char* key, const char* expected,
                      const boost::json::value& got) {
  return fail(PLX_ERR_INVALID_ARGUMENT, "config error at " + config::join_path(config_node_path(node), key) +
                                            ": expected " + expected + ", got " + config::describe(got));
}

plx_status get_int(void*, plx_config node, const char* key, int64_t* out) {
  plx_status status = PLX_OK;
  const auto* v = lookup(node, key, status);
  if (v == nullptr) return status;
  if (v->is_int64()) {
    *out = v->as_int64();
  } else if (v->is_uint64() && v->as_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
    *out = static_cast<int64_t>(v->as_uint64());
  } else {
    return type_error(node, key, "an integer", *v);
  }
  return PLX_OK;
}

plx_status get_number(void*, plx_config node, const char* key, double* out) {
  plx_status status = PLX_OK;
  const auto* v = lookup(node, key, status);
  if (v == nullptr) return status;
  if (!v->is_number()) return type_error(node, key, "a number", *v);
  *out = v->to_number<double>();
  return PLX_OK;
}

plx_status get_bool(void*, plx_config node, const char* key, int32_t* out) {
  plx_status status = PLX_OK;
  const auto* v = lookup(node, key, status);
  if (v == nullptr) return status;
  if (!v->is_bool()) return type_error(node, key, "a boolean", *v);
  *out = v->as_bool() ? 1 : 0;
  return PLX_OK;
}

plx_status get_string(void*, plx_config node, const char* key, const char** out) {
  plx_status status = PLX_OK;
  const auto* v = lookup(node, key, status);
  if (v == nullptr) return status;
  if (!v->is_string()) return type_error(node, key, "a string", *v);
  *out = v->as_string().c_str();  // boost::json strings are NUL-terminated and owned by the node
  return PLX_OK;
}

plx_status get_child(void*, plx_config node, const char* key, plx_config* out) {
  plx_status status = PLX_OK;
  const auto* v = lookup(node, key, status);
  if (v == nullptr) return status;
  *out = child_node(node, *v, config::join_path(config_node_path(node), key));
  return PLX_OK;
}

plx_status to_json(void*, plx_config node, const char** out) {
  if (node == nullptr) return fail(PLX_ERR_INVALID_ARGUMENT, "config_to_json of a null node");
  *out = keep_string(node, boost::json::serialize(*config_value(node)));
  return PLX_OK;
}

plx_status path_of(void*, plx_config node, const char** out) {
  if (node == nullptr) return fail(PLX_ERR_INVALID_ARGUMENT, "config_path of a null node");
  *out = config_node_path(node).c_str();
  return PLX_OK;
}

}  // namespace

void fill_config_functions(plx_host_api& api) {
  api.config_get_int = &get_int;
  api.config_get_number = &get_number;
  api.config_get_bool = &get_bool;
  api.config_get_string = &get_string;
  api.config_get_child = &get_child;
  api.config_to_json = &to_json;
  api.config_path = &path_of;
}

}  // namespace plexus::detail

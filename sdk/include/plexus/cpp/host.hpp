// Plexus SDK C++ helpers: typed access to the host services.
#ifndef PLEXUS_CPP_HOST_HPP
#define PLEXUS_CPP_HOST_HPP

#include <cstdint>
#include <optional>
#include <string>

#include "plexus/cpp/error.hpp"
#include "plexus/host.h"

namespace plexus::sdk {

// Thin, copyable wrapper over the host table. Every failure throws Error carrying the host's
// own message (which names the config path, group or device involved).
class Host {
 public:
  static Host current() {
    const plx_host_api* api = detail::host_slot();
    if (api == nullptr) throw Error(PLX_ERR_INTERNAL, "the plugin was used before the host initialized it");
    return Host(api);
  }
  explicit Host(const plx_host_api* api) : api_(api) {}
  const plx_host_api* api() const noexcept { return api_; }
  // True when the host is new enough to have `field` (compare with min_host_minor).
  uint32_t abi_version() const noexcept { return api_->abi_version; }

  void log(int32_t level, const std::string& message) const { api_->log(api_->ctx, level, message.c_str()); }
  void info(const std::string& message) const { log(PLX_LOG_INFO, message); }
  void warn(const std::string& message) const { log(PLX_LOG_WARN, message); }
  bool logs(int32_t level) const { return level >= api_->log_level(api_->ctx); }

  // ABI 1.1. On a 1.0 host the value is dropped: metrics are never worth refusing to load.
  void report_metric(const char* name, double value) const {
    if (PLX_HAS_FIELD(api_, plx_host_api, report_metric) && api_->report_metric != nullptr)
      api_->report_metric(api_->ctx, name, value);
  }

  // The native handle of a stream (a cudaStream_t on CUDA) for launching work on it; nullptr
  // for the NULL stream (the device's default). Throws Error when the host cannot name it.
  void* stream_native(plx_stream stream) const {
    if (stream == nullptr) return nullptr;
    if (api_->stream_native == nullptr)
      throw Error(PLX_ERR_UNSUPPORTED,
                  "the host cannot name the native stream of a plx_stream (no stream_native)");
    void* native = nullptr;
    check_host(api_->stream_native(api_->ctx, stream, &native));
    return native;
  }

  void* alloc(DLDevice device, uint64_t bytes, uint64_t alignment = 0) const {
    void* ptr = nullptr;
    check_host(api_->alloc(api_->ctx, device, bytes, alignment, &ptr));
    return ptr;
  }
  void free(DLDevice device, void* ptr) const noexcept { api_->free(api_->ctx, device, ptr); }

  int64_t config_int(plx_config node, const char* key) const {
    int64_t v = 0;
    check_host(api_->config_get_int(api_->ctx, node, key, &v));
    return v;
  }
  double config_number(plx_config node, const char* key) const {
    double v = 0;
    check_host(api_->config_get_number(api_->ctx, node, key, &v));
    return v;
  }
  bool config_bool(plx_config node, const char* key) const {
    int32_t v = 0;
    check_host(api_->config_get_bool(api_->ctx, node, key, &v));
    return v != 0;
  }
  std::string config_string(plx_config node, const char* key) const {
    const char* v = nullptr;
    check_host(api_->config_get_string(api_->ctx, node, key, &v));
    return v;
  }
  plx_config config_child(plx_config node, const char* key) const {
    plx_config child = nullptr;
    check_host(api_->config_get_child(api_->ctx, node, key, &child));
    return child;
  }
  // The node as JSON text, for options a plugin parses itself (maps with keys of its choosing).
  std::string config_json(plx_config node) const {
    const char* v = nullptr;
    check_host(api_->config_to_json(api_->ctx, node, &v));
    return v;
  }
  std::string config_path(plx_config node) const {
    const char* v = nullptr;
    check_host(api_->config_path(api_->ctx, node, &v));
    return v;
  }
  // Absent keys give std::nullopt; a present key of the wrong type still throws.
  std::optional<int64_t> config_int_if(plx_config node, const char* key) const {
    int64_t v = 0;
    const plx_status s = api_->config_get_int(api_->ctx, node, key, &v);
    if (s == PLX_ERR_NOT_FOUND) return std::nullopt;
    check_host(s);
    return v;
  }
  std::optional<std::string> config_string_if(plx_config node, const char* key) const {
    const char* v = nullptr;
    const plx_status s = api_->config_get_string(api_->ctx, node, key, &v);
    if (s == PLX_ERR_NOT_FOUND) return std::nullopt;
    check_host(s);
    return std::string(v);
  }
  std::optional<bool> config_bool_if(plx_config node, const char* key) const {
    int32_t v = 0;
    const plx_status s = api_->config_get_bool(api_->ctx, node, key, &v);
    if (s == PLX_ERR_NOT_FOUND) return std::nullopt;
    check_host(s);
    return v != 0;
  }

 private:
  const plx_host_api* api_;
};

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_HOST_HPP

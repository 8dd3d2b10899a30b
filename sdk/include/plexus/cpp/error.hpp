// Plexus SDK C++ helpers: errors and the exception barrier at the ABI boundary.
// Header-only and C++17, so a plugin built by any compiler and standard library can use it.
#ifndef PLEXUS_CPP_ERROR_HPP
#define PLEXUS_CPP_ERROR_HPP

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "plexus/host.h"

namespace plexus::sdk {

// Throw this from plugin code to return a specific status with a message.
class Error : public std::runtime_error {
 public:
  Error(plx_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  // A failure the host already described (its own set_error ran): keep the host's message.
  static Error from_host(plx_status status) { return Error(status, std::string()); }
  plx_status status() const noexcept { return status_; }

 private:
  plx_status status_;
};

namespace detail {
// The host table this plugin library was handed. Each plugin is its own shared object with
// hidden symbols, so this slot is private to the plugin even with many plugins loaded.
inline const plx_host_api*& host_slot() noexcept {
  static const plx_host_api* host = nullptr;
  return host;
}

inline void report(plx_status status, const std::string& message) noexcept {
  const plx_host_api* host = host_slot();
  if (host != nullptr && PLX_HAS_FIELD(host, plx_host_api, set_error) && host->set_error != nullptr)
    host->set_error(host->ctx, status, message.c_str());
}
}  // namespace detail

// Runs `body` and turns every exception into a status plus a message for the host, so no
// exception ever crosses the C boundary. `operation` prefixes the message ("forward: ...").
template <class Body>
plx_status guard(const char* operation, Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return PLX_OK;
  } catch (const Error& e) {
    if (e.what()[0] != '\0') detail::report(e.status(), std::string(operation) + ": " + e.what());
    return e.status() == PLX_OK ? PLX_ERR_INTERNAL : e.status();
  } catch (const std::bad_alloc&) {
    detail::report(PLX_ERR_OUT_OF_MEMORY, std::string(operation) + ": out of memory");
    return PLX_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    detail::report(PLX_ERR_INTERNAL, std::string(operation) + ": " + e.what());
    return PLX_ERR_INTERNAL;
  } catch (...) {
    detail::report(PLX_ERR_INTERNAL, std::string(operation) + ": unknown exception");
    return PLX_ERR_INTERNAL;
  }
}

// Throws Error::from_host when a host call failed (the host already set the message).
inline void check_host(plx_status status) {
  if (status != PLX_OK) throw Error::from_host(status);
}

// Copies `value` into a caller-sized out struct: only the fields inside the caller's
// struct_size are written, so an older caller's smaller struct is never overrun.
template <class T>
void write_out(T* out, T value) {
  if (out == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null output struct");
  const uint32_t caller_size = out->struct_size;
  if (caller_size < sizeof(uint32_t)) throw Error(PLX_ERR_INVALID_ARGUMENT, "output struct_size not set");
  const std::size_t size = caller_size < sizeof(T) ? caller_size : sizeof(T);
  value.struct_size = static_cast<uint32_t>(size);
  const auto* from = reinterpret_cast<const unsigned char*>(&value);
  auto* to = reinterpret_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < size; ++i) to[i] = from[i];
}

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_ERROR_HPP

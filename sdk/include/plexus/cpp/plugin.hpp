// Plexus SDK C++ helpers: the plugin entry point for C++ plugins.
//
//   static const plx_component_desc kScale = plexus::sdk::layer_component<Scale>("my.scale", "...");
//   PLEXUS_PLUGIN("my_plugin", "1.0.0", "What it offers", &kScale)
//
// Optional hooks: define PLEXUS_PLUGIN_WITH_INIT(name, version, description, init_fn, ...)
// where init_fn is `void init(plexus::sdk::Host)` and may throw to refuse loading.
#ifndef PLEXUS_CPP_PLUGIN_HPP
#define PLEXUS_CPP_PLUGIN_HPP

#include "plexus/cpp/components.hpp"
#include "plexus/cpp/error.hpp"
#include "plexus/cpp/host.hpp"
#include "plexus/cpp/layer.hpp"
#include "plexus/plugin.h"

namespace plexus::sdk::detail {

using InitHook = void (*)(Host);

// Returns the descriptor whatever the host's version: the host, not the plugin, decides
// compatibility, so its message can name both versions.
inline plx_status plugin_entry(const plx_host_api* host, const plx_plugin_descriptor** out,
                               plx_plugin_descriptor& descriptor) noexcept {
  if (out == nullptr) return PLX_ERR_INVALID_ARGUMENT;
  if (host != nullptr && PLX_VERSION_MAJOR(host->abi_version) == PLX_ABI_MAJOR) host_slot() = host;
  *out = &descriptor;
  return PLX_OK;
}

template <InitHook Hook>
plx_status plugin_init(const plx_host_api* host) noexcept {
  host_slot() = host;
  return guard("init", [&] {
    if constexpr (Hook != nullptr) Hook(Host(host));
  });
}

}  // namespace plexus::sdk::detail

#define PLEXUS_PLUGIN_WITH_INIT(plugin_name, plugin_version, plugin_description, init_hook, ...) \
  PLX_PLUGIN_ENTRY(plexus_host_, plexus_out_) {                                                  \
    static const plx_component_desc* const plexus_components_[] = {__VA_ARGS__};                 \
    static plx_plugin_descriptor plexus_descriptor_ = {                                           \
        sizeof(plx_plugin_descriptor),                                                            \
        PLX_ABI_VERSION,                                                                          \
        0,                                                                                        \
        static_cast<uint32_t>(sizeof(plexus_components_) / sizeof(plexus_components_[0])),        \
        plugin_name,                                                                              \
        plugin_version,                                                                           \
        plugin_description,                                                                       \
        plexus_components_,                                                                       \
        &::plexus::sdk::detail::plugin_init<init_hook>,                                           \
        nullptr};                                                                                 \
    return ::plexus::sdk::detail::plugin_entry(plexus_host_, plexus_out_, plexus_descriptor_);   \
  }

#define PLEXUS_PLUGIN(plugin_name, plugin_version, plugin_description, ...) \
  PLEXUS_PLUGIN_WITH_INIT(plugin_name, plugin_version, plugin_description, nullptr, __VA_ARGS__)

#endif  // PLEXUS_CPP_PLUGIN_HPP

// The run configuration: the JSON document a user hands to plexus-train / plexus config check.
// Its framework-level keys are validated against the schema in schema.json (embedded); each
// component's "options" are validated against the schema the component's plugin declares.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "plexus/core/config.hpp"
#include "plexus/core/plugin_host.hpp"

namespace plexus {

// configs/default.json, compiled in.
std::string_view default_config_text();
// The framework's own schema (framework/src/run_config/schema.json, compiled in).
const config::Schema& framework_schema();

// Loads `file` (or the embedded default when empty), applies the --set overrides, validates
// against the framework schema and fills its defaults. Throws config::ConfigError.
boost::json::value load_run_config(const std::optional<std::filesystem::path>& file,
                                   const std::vector<std::string>& overrides);

struct PluginLoadOptions {
  std::vector<std::filesystem::path> extra_paths;  // --plugin-path, searched first
  bool allow_world_writable = false;               // --allow-world-writable-plugins
};

// Loads every plugin the config names in plugins.load, then, on demand, the plugins of the
// model's stack and of the layers the stack describes that no loaded plugin provides (see
// plugin_of_component). Throws PluginError or config::ConfigError.
void load_configured_plugins(PluginHost& host, const boost::json::value& run_config,
                             const PluginLoadOptions& options);

// The in-tree plugin that provides a component, for loading it on demand: "comm_<name>" for a comm
// backend, "topology_default" for "grid", and for every other component the part of its name
// before the first '.' ("mamba.mixer" -> "mamba", "hybrid_stack" -> "hybrid_stack").
std::string plugin_of_component(uint32_t kind, const std::string& component);

// The component `name` of `kind`; when no loaded plugin provides it, its plugin is loaded from the
// search path first. `key` is the config key that names it, for the error when neither works.
const Component& ensure_component(PluginHost& host, uint32_t kind, const std::string& name, const std::string& key,
                                  const PluginLoadOptions& options, const boost::json::value& run_config);

// A component the config refers to: "<section>": {"component": NAME, "options": {...}}.
struct ComponentRef {
  std::string section;  // JSON path of the section, e.g. "scheduler"
  uint32_t kind = 0;
  std::string name;
  std::string key = "component";  // the key in the section that names it ("backend" for mhc)
};
std::vector<ComponentRef> component_refs(const boost::json::value& run_config);

// `options` (null meaning {}) validated against the component's schema, defaults filled in; `path`
// names them in errors ("model.attention.options"). Throws config::ConfigError.
boost::json::value validated_component_options(const Component& component, boost::json::value options,
                                               const std::string& path);

// Checks that every referenced component is loaded and validates (and default-fills) its
// options against the component's schema. Throws PluginError or config::ConfigError.
void check_components(const PluginHost& host, boost::json::value& run_config);

}  // namespace plexus

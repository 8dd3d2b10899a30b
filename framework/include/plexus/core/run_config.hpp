// The run configuration: the JSON document a user hands to plexus-train / plexus config check.
// Its framework-level keys are validated against the schema in schema.json (embedded); the keys
// the model's stack component adds to the model section against the schema the stack declares
// (plx_component_desc.model_schema); each component's "options" against the schema the
// component's plugin declares.
//
// Checking happens in two phases because plugins.load, which says which plugins to load, is part
// of the config: load_run_config checks the framework's keys before any plugin is loaded, leaving
// the model's other keys for the stack; check_model_keys (called by load_configured_plugins on a
// copy, and by check_components on the config itself) checks those once the stack is loaded.
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
// The framework's own schema (framework/src/run_config/schema.json, compiled in). Its model
// section accepts keys it does not declare: they belong to the model's stack component, whose
// plugin is not loaded when this schema is applied (model_section_schema has them).
const config::Schema& framework_schema();

// Loads `file` (or the embedded default when empty), applies the --set overrides, validates
// against the framework schema and fills its defaults. Keys of the model section the framework
// does not declare are left for check_model_keys. Throws config::ConfigError.
boost::json::value load_run_config(const std::optional<std::filesystem::path>& file,
                                   const std::vector<std::string>& overrides);

struct PluginLoadOptions {
  std::vector<std::filesystem::path> extra_paths;  // --plugin-path, searched first
  bool allow_world_writable = false;               // --allow-world-writable-plugins
};

// Loads every plugin the config names in plugins.load, then, on demand, the plugins of the
// model's stack, of the data-parallel strategy, and of the layers the stack describes that no
// loaded plugin provides (see PluginHost::load_provider). Once the stack is loaded, the model's
// keys are checked against it (check_model_keys, on a copy: the caller's config is filled by
// check_components). Throws PluginError or config::ConfigError.
void load_configured_plugins(PluginHost& host, const boost::json::value& run_config,
                             const PluginLoadOptions& options);

// The component `name` of `kind`; when no loaded plugin provides it, the plugin that does is
// found by its descriptor on the search path (options' directories, then plugins.paths, then the
// usual ones) and loaded. `key` is the config key that names it: when no plugin provides it, the
// config::ConfigError names the key, the component and every plugin looked at.
const Component& ensure_component(PluginHost& host, uint32_t kind, const std::string& name, const std::string& key,
                                  const PluginLoadOptions& options, const boost::json::value& run_config);

// The schema of the run config's model section with the model's stack loaded: the framework's
// model keys plus those the stack (model.stack.component) declares in its model schema. A stack
// declaring none adds none; a stack built before ABI 1.6 cannot declare any, and the model keys
// the framework does not know are passed to it unchecked. Throws config::ConfigError at
// model.stack.component when the stack is not loaded or declares a key the framework has.
config::Schema model_section_schema(const PluginHost& host, const boost::json::value& run_config);

// Checks the model section against model_section_schema and fills the stack's defaults: unknown
// keys (with the nearest of the framework's and the stack's keys), types and bounds, named by
// their full path. Throws config::ConfigError.
void check_model_keys(const PluginHost& host, boost::json::value& run_config);

// A run config saved in a checkpoint's state.json, read back: validated against the framework
// schema and the saved model stack's keys (which must be loaded), with the defaults of both filled
// in, as a run being resumed has them. Components' options are left as saved. Throws
// config::ConfigError.
void validate_saved_run_config(const PluginHost& host, boost::json::value& run_config);

// A component the config refers to: "<section>": {"component": NAME, "options": {...}}.
struct ComponentRef {
  std::string section;  // JSON path of the section, e.g. "scheduler"
  uint32_t kind = 0;
  std::string name;
  std::string key = "component";  // the key in the section that names it ("backend" for mhc)
};
// The framework's component sections (scheduler, distributed.data_parallel, the model's embedding,
// final norm and head, mhc's backend when enabled).
std::vector<ComponentRef> component_refs(const boost::json::value& run_config);
// Those and the component sections the model's stack declares ("component_kind" in its model
// schema, e.g. model.attention and model.mlp of hybrid_stack).
std::vector<ComponentRef> component_refs(const PluginHost& host, const boost::json::value& run_config);

// `options` (null meaning {}) validated against the component's schema, defaults filled in; `path`
// names them in errors ("model.attention.options"). Throws config::ConfigError.
boost::json::value validated_component_options(const Component& component, boost::json::value options,
                                               const std::string& path);

// Checks the model's keys against its stack (check_model_keys), that every referenced component
// is loaded, and validates (and default-fills) its options against the component's schema; the
// decoder's layers are checked through the stack's description. Throws PluginError or
// config::ConfigError.
void check_components(const PluginHost& host, boost::json::value& run_config);

}  // namespace plexus

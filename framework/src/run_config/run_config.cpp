#include "plexus/core/run_config.hpp"

#include <array>
#include <utility>

#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/logging.hpp"
#include "plexus/data_parallel.h"
#include "plexus/stack.h"

namespace fs = std::filesystem;

namespace plexus {
namespace detail {
extern const std::string_view kDefaultConfigText;
extern const std::string_view kFrameworkSchemaText;
}  // namespace detail

namespace {
// The config sections that name a component, and the kind each must be.
struct ComponentSection {
  const char* path;
  uint32_t kind;
  const char* key = "component";     // the key naming the component
  const char* enabled_by = nullptr;  // a boolean key in the section that must be true
};
constexpr std::array<ComponentSection, 8> kComponentSections = {
    {{"scheduler", PLX_KIND_SCHEDULER},
     {"distributed.data_parallel", PLX_KIND_DATA_PARALLEL},
     {"model.embedding", PLX_KIND_LAYER},
     {"model.attention", PLX_KIND_LAYER},
     {"model.mlp", PLX_KIND_LAYER},
     {"model.final_norm", PLX_KIND_LAYER},
     {"model.head", PLX_KIND_LAYER},
     {"mhc", PLX_KIND_FUSION_BACKEND, "backend", "enabled"}}};
}  // namespace

std::string_view default_config_text() {
  return detail::kDefaultConfigText;
}

const config::Schema& framework_schema() {
  static const config::Schema schema =
      config::Schema::parse(detail::kFrameworkSchemaText, "framework schema");
  return schema;
}

boost::json::value load_run_config(const std::optional<fs::path>& file,
                                   const std::vector<std::string>& overrides) {
  boost::json::value root = file ? config::load_file(*file)
                                 : config::parse_text(default_config_text(), "<embedded default config>");
  config::apply_overrides(root, overrides, &framework_schema());
  config::validate(root, framework_schema());
  return root;
}

void load_configured_plugins(PluginHost& host, const boost::json::value& run_config,
                             const PluginLoadOptions& options) {
  const boost::json::object& plugins = run_config.at("plugins").as_object();
  std::vector<fs::path> dirs = options.extra_paths;
  for (const boost::json::value& dir : plugins.at("paths").as_array())
    dirs.emplace_back(std::string(dir.as_string()));
  const std::vector<fs::path> search_path = plugin_search_path(dirs);
  LoadOptions load_options;
  load_options.allow_world_writable =
      options.allow_world_writable || plugins.at("allow_world_writable").as_bool();
  for (const boost::json::value& reference : plugins.at("load").as_array()) {
    const fs::path file = resolve_plugin(std::string(reference.as_string()), search_path);
    const PluginRecord& record = host.load(file, load_options);
    Logger::global().log(LogLevel::debug, "plugin-host",
                         "loaded " + record.name + " " + record.version + " from " + record.file.string());
  }
  // The model's stack and the layers it describes, from their plugins when plugins.load does not
  // list them (a GPT config written before stacks existed needs no new entry).
  const auto& stack = run_config.at("model").at("stack");
  ensure_component(host, PLX_KIND_STACK, std::string(stack.at("component").as_string()), "model.stack.component",
                   options, run_config);
  // The data-parallel strategy likewise (its plugin is small, and loading it always lets a config
  // be checked whole on one process).
  const auto& data_parallel = run_config.at("distributed").at("data_parallel");
  ensure_component(host, PLX_KIND_DATA_PARALLEL, std::string(data_parallel.at("component").as_string()),
                   "distributed.data_parallel.component", options, run_config);
  for (const DecoderLayerPlan& layer : plan_decoder(host, run_config, false).layers)
    ensure_component(host, PLX_KIND_LAYER, layer.component,
                     layer.component_key + " (pattern symbol '" + layer.symbol + "')", options, run_config);
}

std::vector<ComponentRef> component_refs(const boost::json::value& run_config) {
  std::vector<ComponentRef> refs;
  for (const ComponentSection& section : kComponentSections) {
    const boost::json::value* node = config::find(run_config, section.path);
    if (node == nullptr || !node->is_object()) continue;
    if (section.enabled_by != nullptr) {
      const boost::json::value* enabled = node->as_object().if_contains(section.enabled_by);
      if (enabled == nullptr || !enabled->is_bool() || !enabled->as_bool()) continue;
    }
    const boost::json::value* name = node->as_object().if_contains(section.key);
    if (name == nullptr || !name->is_string()) continue;
    refs.push_back({section.path, section.kind, std::string(name->as_string()), section.key});
  }
  return refs;
}

void check_components(const PluginHost& host, boost::json::value& run_config) {
  for (const ComponentRef& ref : component_refs(run_config)) {
    const Component* component = host.find(ref.kind, ref.name);
    if (component == nullptr) {
      try {
        (void)host.get(ref.kind, ref.name);
      } catch (const PluginError& e) {
        throw config::ConfigError(ref.section + "." + ref.key,
                                  std::string(e.what()) + " (plugins.load lists the plugins a run loads)");
      }
    }
    // The section exists: component_refs found it. find() walks dotted paths.
    auto& section = const_cast<boost::json::value*>(config::find(run_config, ref.section))->as_object();
    section["options"] = validated_component_options(*component, section["options"], ref.section + ".options");
  }
  // The decoder's layers come from the stack: each named component must be there, and its options
  // (from wherever the stack took them) must be valid.
  (void)plan_decoder(host, run_config);
}

boost::json::value validated_component_options(const Component& component, boost::json::value options,
                                               const std::string& path) {
  if (options.is_null()) options = boost::json::object();
  if (component.config_schema.empty()) {
    if (!options.is_object() || !options.as_object().empty())
      throw config::ConfigError(path, "component '" + component.name + "' takes no options");
    return options;
  }
  const config::Schema schema =
      config::Schema::parse(component.config_schema, "config schema of component '" + component.name + "'");
  config::validate(options, schema, path);
  return options;
}

std::string plugin_of_component(uint32_t kind, const std::string& component) {
  if (kind == PLX_KIND_COMM) return "comm_" + component;
  if (kind == PLX_KIND_TOPOLOGY && component == "grid") return "topology_default";
  if (kind == PLX_KIND_SCHEDULER && component == "sequential") return "sequential_scheduler";
  return component.substr(0, component.find('.'));
}

const Component& ensure_component(PluginHost& host, uint32_t kind, const std::string& name, const std::string& key,
                                  const PluginLoadOptions& options, const boost::json::value& run_config) {
  if (const Component* found = host.find(kind, name)) return *found;
  const std::string plugin = plugin_of_component(kind, name);
  std::vector<fs::path> dirs = options.extra_paths;
  for (const boost::json::value& dir : run_config.at("plugins").at("paths").as_array())
    dirs.emplace_back(std::string(dir.as_string()));
  fs::path file;
  try {
    file = resolve_plugin(plugin, plugin_search_path(dirs));
  } catch (const PluginError& e) {
    throw config::ConfigError(key, "the " + std::string(kind_name(kind)) + " component '" + name +
                                       "' is not provided by any loaded plugin, and its plugin " + plugin +
                                       " cannot be loaded: " + e.what());
  }
  // A plugin of that name that does not provide the component is named, not silently skipped.
  bool loaded = false;
  for (const PluginRecord* record : host.plugins()) {
    std::error_code ec;
    loaded = loaded || fs::equivalent(record->file, file, ec);
  }
  if (!loaded) {
    LoadOptions load;
    load.allow_world_writable =
        options.allow_world_writable || run_config.at("plugins").at("allow_world_writable").as_bool();
    const PluginRecord& record = host.load(file, load);
    Logger::global().log(LogLevel::debug, "plugin-host",
                         "loaded " + record.name + " " + record.version + " from " + record.file.string() +
                             " on demand, for " + key);
  }
  try {
    return host.get(kind, name);
  } catch (const PluginError& e) {
    throw config::ConfigError(key, std::string(e.what()) + " (plugins.load lists the plugins a run loads)");
  }
}

}  // namespace plexus

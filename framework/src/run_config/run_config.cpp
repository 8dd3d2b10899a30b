#include "plexus/core/run_config.hpp"

#include <array>
#include <utility>

#include <boost/json.hpp>

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
// The framework's config sections that name a component, and the kind each must be. (A stack's
// sections say so in its model schema: "component_kind".)
struct ComponentSection {
  const char* path;
  uint32_t kind;
  const char* key = "component";     // the key naming the component
  const char* enabled_by = nullptr;  // a boolean key in the section that must be true
};
constexpr std::array<ComponentSection, 6> kComponentSections = {
    {{"scheduler", PLX_KIND_SCHEDULER},
     {"distributed.data_parallel", PLX_KIND_DATA_PARALLEL},
     {"model.embedding", PLX_KIND_LAYER},
     {"model.final_norm", PLX_KIND_LAYER},
     {"model.head", PLX_KIND_LAYER},
     {"mhc", PLX_KIND_FUSION_BACKEND, "backend", "enabled"}}};

// The framework schema as JSON, to which model_section_schema adds a stack's keys.
const boost::json::value& framework_schema_json() {
  static const boost::json::value schema =
      config::parse_text(detail::kFrameworkSchemaText, "framework schema");
  return schema;
}

const Component& model_stack(const PluginHost& host, const boost::json::value& run_config) {
  const std::string name(run_config.at("model").at("stack").at("component").as_string());
  if (const Component* stack = host.find(PLX_KIND_STACK, name)) return *stack;
  try {
    (void)host.get(PLX_KIND_STACK, name);
  } catch (const PluginError& e) {
    throw config::ConfigError("model.stack.component", e.what());
  }
  throw config::ConfigError("model.stack.component", "no stack component named '" + name + "' is loaded");
}

std::vector<fs::path> configured_search_path(const PluginLoadOptions& options,
                                             const boost::json::value& run_config) {
  std::vector<fs::path> dirs = options.extra_paths;
  for (const boost::json::value& dir : run_config.at("plugins").at("paths").as_array())
    dirs.emplace_back(std::string(dir.as_string()));
  return plugin_search_path(dirs);
}

// The component sections under `schema` ("component_kind"), where the config has them.
void declared_component_refs(const config::Schema& schema, const boost::json::value* node,
                             const std::string& path, std::vector<ComponentRef>& refs) {
  if (node == nullptr || !node->is_object()) return;
  for (const config::SchemaProperty& property : schema.properties()) {
    const boost::json::value* child = node->as_object().if_contains(property.name);
    const std::string child_path = config::join_path(path, property.name);
    if (property.schema.component_kind().empty()) {
      declared_component_refs(property.schema, child, child_path, refs);
      continue;
    }
    const auto kind = kind_from_name(property.schema.component_kind());
    if (!kind || child == nullptr || !child->is_object())
      continue;  // kinds are checked when the plugin loads
    const boost::json::value* name = child->as_object().if_contains("component");
    if (name == nullptr || !name->is_string()) continue;
    refs.push_back({child_path, *kind, std::string(name->as_string()), "component"});
  }
}

// check_model_keys; `warn`: name the keys a stack from before ABI 1.6 gets unchecked, with the
// nearest framework key, so that a typo there is still seen (such a stack cannot declare its keys).
void check_model_section(const PluginHost& host, boost::json::value& run_config, bool warn) {
  const config::Schema schema = model_section_schema(host, run_config);
  boost::json::value& model = run_config.as_object()["model"];
  const Component& stack = model_stack(host, run_config);
  if (warn && !stack.declares_model_keys) {
    const config::Schema& framework_model = *framework_schema().property("model");
    std::vector<std::string> framework_keys;
    for (const config::SchemaProperty& p : framework_model.properties()) framework_keys.push_back(p.name);
    for (const auto& [key, value] : model.as_object()) {
      if (framework_model.property(key) != nullptr) continue;
      const auto nearest = config::nearest(key, framework_keys);
      log_warn("run-config", config::join_path("model", key) + " is not a framework key, and the stack '" +
                                 stack.name + "' (plugin " + stack.plugin->name +
                                 ", built before stacks declared their model keys in ABI 1.6) cannot say "
                                 "whether it reads it: passed to it unchecked" +
                                 (nearest ? " (did you mean '" + *nearest + "'?)" : std::string()));
    }
  }
  config::validate(model, schema, "model");
}

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
  const std::vector<fs::path> search_path = configured_search_path(options, run_config);
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
  // The stack's keys, checked before they decide which layers' plugins to load: a misspelt key
  // would otherwise be read as absent and load the plugins of a decoder the user did not write.
  boost::json::value checked = run_config;
  check_model_section(host, checked, false);  // check_components warns, on the caller's config
  // The data-parallel strategy likewise (its plugin is small, and loading it always lets a config
  // be checked whole on one process).
  const auto& data_parallel = run_config.at("distributed").at("data_parallel");
  ensure_component(host, PLX_KIND_DATA_PARALLEL, std::string(data_parallel.at("component").as_string()),
                   "distributed.data_parallel.component", options, run_config);
  for (const DecoderLayerPlan& layer : plan_decoder(host, checked, false).layers)
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

std::vector<ComponentRef> component_refs(const PluginHost& host, const boost::json::value& run_config) {
  std::vector<ComponentRef> refs = component_refs(run_config);
  declared_component_refs(model_section_schema(host, run_config), config::find(run_config, "model"), "model",
                          refs);
  return refs;
}

config::Schema model_section_schema(const PluginHost& host, const boost::json::value& run_config) {
  const Component& stack = model_stack(host, run_config);
  boost::json::object model = framework_schema_json().at("properties").at("model").as_object();
  const std::string label = "stack '" + stack.name + "' (plugin " + stack.plugin->name + ")";
  // Built before stacks declared their keys: which model keys it reads is unknown, so the ones the
  // framework does not know pass to it unchecked, as a plugin of that SDK expects.
  model["additional_properties"] = !stack.declares_model_keys;
  if (!stack.model_schema.empty()) {
    // Checked when the plugin loaded (an object schema in the config subset).
    const boost::json::value declared = config::parse_text(stack.model_schema, "model schema of " + label);
    boost::json::object& properties = model["properties"].as_object();
    if (const boost::json::value* keys = declared.as_object().if_contains("properties"))
      for (const auto& [key, schema] : keys->as_object()) {
        if (properties.contains(key))
          throw config::ConfigError("model.stack.component",
                                    "the " + label + " declares the model key '" + std::string(key) +
                                        "', which the framework declares itself; a stack may only add keys");
        properties[key] = schema;
      }
    if (const boost::json::value* extra = declared.as_object().if_contains("additional_properties"))
      model["additional_properties"] = *extra;
    // The framework requires no model key, so the stack's list is the section's.
    if (const boost::json::value* required = declared.as_object().if_contains("required"))
      model["required"] = *required;
  }
  return config::Schema::from_json(model, "the model section with the keys of " + label);
}

void check_model_keys(const PluginHost& host, boost::json::value& run_config) {
  check_model_section(host, run_config, true);
}

void validate_saved_run_config(const PluginHost& host, boost::json::value& run_config) {
  config::validate(run_config, framework_schema());
  check_model_section(host, run_config, false);
}

void check_components(const PluginHost& host, boost::json::value& run_config) {
  check_model_keys(host, run_config);
  for (const ComponentRef& ref : component_refs(host, run_config)) {
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

const Component& ensure_component(PluginHost& host, uint32_t kind, const std::string& name, const std::string& key,
                                  const PluginLoadOptions& options, const boost::json::value& run_config) {
  if (const Component* found = host.find(kind, name)) return *found;
  LoadOptions load;
  load.allow_world_writable =
      options.allow_world_writable || run_config.at("plugins").at("allow_world_writable").as_bool();
  const std::size_t plugins_before = host.plugins().size();
  try {
    const Component& component =
        host.load_provider(kind, name, configured_search_path(options, run_config), load);
    if (host.plugins().size() > plugins_before) {
      const PluginRecord& record = *component.plugin;
      Logger::global().log(LogLevel::debug, "plugin-host",
                           "loaded " + record.name + " " + record.version + " from " + record.file.string() +
                               " on demand, for " + key);
    }
    return component;
  } catch (const PluginError& e) {
    // Not found (the message lists what was looked at and how to add a directory), or the
    // provider's plugin did not load (the message says why).
    throw config::ConfigError(key, e.what());
  }
}

}  // namespace plexus

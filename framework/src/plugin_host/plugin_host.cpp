// Loading a plugin, step by step; each step that can fail says which file and what.
#include "plexus/core/plugin_host.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "plexus/core/config.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/logging.hpp"
#include "plugin_host/kinds.hpp"
#include "plugin_host/library.hpp"
#include "plugin_host/permissions.hpp"

namespace fs = std::filesystem;

namespace plexus {
namespace {

std::string version_string(uint32_t version) {
  return std::to_string(PLX_VERSION_MAJOR(version)) + "." + std::to_string(PLX_VERSION_MINOR(version));
}

bool valid_name(const char* name) {
  if (name == nullptr || *name == '\0' || std::strlen(name) > 128) return false;
  for (const char* c = name; *c != '\0'; ++c) {
    const bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                    *c == '_' || *c == '.' || *c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string text_or_empty(const char* text) { return text != nullptr ? text : ""; }

// Copies a plugin-built struct into a zeroed host-sized one: fields the plugin's SDK did not
// have read as zero/NULL, fields from a newer SDK are ignored.
template <class T>
T read_struct(const T* from) {
  T copy{};
  const std::size_t size = std::min<std::size_t>(from->struct_size, sizeof(T));
  std::memcpy(&copy, from, size);
  copy.struct_size = static_cast<uint32_t>(size);
  return copy;
}

// A function-pointer table copied to host size; aligned storage for pointers.
std::unique_ptr<std::uintptr_t[]> copy_table(const void* table, uint32_t plugin_size, std::size_t host_size) {
  const std::size_t words = (host_size + sizeof(std::uintptr_t) - 1) / sizeof(std::uintptr_t);
  auto storage = std::make_unique<std::uintptr_t[]>(words);  // zero-initialized
  std::memcpy(storage.get(), table, std::min<std::size_t>(plugin_size, host_size));
  const auto size = static_cast<uint32_t>(std::min<std::size_t>(plugin_size, host_size));
  std::memcpy(storage.get(), &size, sizeof(size));  // struct_size: what both sides know
  return storage;
}

bool pointer_field_set(const std::uintptr_t* table, std::size_t end) {
  void* fn = nullptr;
  std::memcpy(&fn, reinterpret_cast<const char*>(table) + end - sizeof(void*), sizeof(void*));
  return fn != nullptr;
}

// A plugin library opened and its descriptor read and checked up to the ABI version: load()'s steps
// 1 and 2, which peek() shares.
struct OpenedPlugin {
  boost::dll::shared_library library;
  const plx_host_api* host_table = nullptr;
  plx_plugin_descriptor descriptor{};  // zero-extended to this host's layout
  uint32_t abi_version = 0;
};

using ErrorFactory = std::function<PluginError(const std::string&)>;

OpenedPlugin open_plugin(const fs::path& file, const LoadOptions& options, HostServices& services,
                         const ErrorFactory& error) {
  std::error_code ec;
  if (!fs::exists(file, ec)) throw error("file does not exist");
  if (!fs::is_regular_file(file, ec)) throw error("not a regular file");
  if (!options.allow_world_writable) detail::check_not_world_writable(file);

  OpenedPlugin opened;
  opened.library = detail::open_library(file);

  // 1. The entry point.
  if (!opened.library.has(PLX_ENTRY_SYMBOL)) {
    std::string hint;
    for (int major = 0; major <= 9; ++major) {
      const std::string other = "plexus_plugin_entry_v" + std::to_string(major);
      if (other != PLX_ENTRY_SYMBOL && opened.library.has(other)) hint = " (it exports " + other + ")";
    }
    throw error(std::string("not a Plexus plugin: it does not export the entry symbol ") + PLX_ENTRY_SYMBOL +
                hint);
  }
  const auto entry =
      opened.library.get<plx_status(const plx_host_api*, const plx_plugin_descriptor**)>(PLX_ENTRY_SYMBOL);
  opened.host_table = services.table_for(file.stem().string());
  const plx_plugin_descriptor* raw = nullptr;
  HostServices::clear_last_error();
  if (const plx_status status = entry(opened.host_table, &raw); status != PLX_OK)
    throw error(std::string("entry point failed: ") + plx_status_name(status) + ": " +
                HostServices::take_last_error());
  if (raw == nullptr) throw error("entry point returned no descriptor");

  // 2. The ABI version (struct_size and abi_version are readable whatever the major).
  if (raw->struct_size < 2 * sizeof(uint32_t)) throw error("descriptor is malformed (struct_size too small)");
  const uint32_t plugin_abi = raw->abi_version;
  if (PLX_VERSION_MAJOR(plugin_abi) != PLX_ABI_MAJOR)
    throw error("built against Plexus ABI " + version_string(plugin_abi) + ", but this host implements ABI " +
                version_string(PLX_ABI_VERSION) + "; major versions differ, so rebuild the plugin against a Plexus SDK " +
                std::to_string(PLX_ABI_MAJOR) + ".x");
  if (raw->struct_size < PLX_FIELD_END(plx_plugin_descriptor, components))
    throw error("descriptor is malformed: struct_size " + std::to_string(raw->struct_size) +
                " is smaller than ABI " + std::to_string(PLX_ABI_MAJOR) + ".0 requires");
  const plx_plugin_descriptor descriptor = read_struct(raw);
  if (descriptor.min_host_minor > PLX_ABI_MINOR)
    throw error("needs a host with ABI " + std::to_string(PLX_ABI_MAJOR) + "." +
                std::to_string(descriptor.min_host_minor) + " or newer (built against " + version_string(plugin_abi) +
                "), but this host implements ABI " + version_string(PLX_ABI_VERSION) +
                "; upgrade Plexus or rebuild the plugin for ABI " + version_string(PLX_ABI_VERSION));
  if (!valid_name(descriptor.name))
    throw error("invalid plugin name '" + text_or_empty(descriptor.name) + "' (use letters, digits, '_', '.', '-')");
  if (descriptor.component_count > 0 && descriptor.components == nullptr)
    throw error("descriptor lists " + std::to_string(descriptor.component_count) +
                " components but no array");
  if (descriptor.component_count > 4096) throw error("descriptor lists an implausible number of components");
  opened.descriptor = descriptor;
  opened.abi_version = plugin_abi;
  return opened;
}

// Component #i of a descriptor that open_plugin accepted, zero-extended, with a valid name.
plx_component_desc read_component(const plx_plugin_descriptor& descriptor, uint32_t i,
                                  const ErrorFactory& error) {
  const plx_component_desc* raw_desc = descriptor.components[i];
  const std::string where = "component #" + std::to_string(i);
  if (raw_desc == nullptr) throw error(where + " is NULL");
  if (raw_desc->struct_size < PLX_FIELD_END(plx_component_desc, table))
    throw error(where + " has a malformed descriptor (struct_size " + std::to_string(raw_desc->struct_size) +
                ")");
  plx_component_desc desc = read_struct(raw_desc);
  if (!valid_name(desc.name))
    throw error(where + " has an invalid name '" + text_or_empty(desc.name) +
                "' (use letters, digits, '_', '.', '-')");
  return desc;
}

// Every "component_kind" in a schema must name a kind this host knows, or the run config's checks
// could not look the component up.
void check_component_kinds(const config::Schema& schema, const std::string& at, const ErrorFactory& error) {
  if (!schema.component_kind().empty() && !kind_from_name(schema.component_kind()))
    throw error("at " + (at.empty() ? std::string("the top") : at) + ": unknown component_kind '" +
                schema.component_kind() + "'; this host knows: " + detail::known_kinds_list());
  for (const config::SchemaProperty& p : schema.properties())
    check_component_kinds(p.schema, config::join_path(at, p.name), error);
}

constexpr config::JsonType kNonObjectTypes[] = {config::JsonType::null,    config::JsonType::boolean,
                                                config::JsonType::integer, config::JsonType::number,
                                                config::JsonType::string,  config::JsonType::array};

// The model schema's text, checked: the subset of JSON Schema, an object's, with known kinds.
std::string checked_model_schema(const plx_component_desc& desc, const std::string& label,
                                 const ErrorFactory& error) {
  if (desc.struct_size < PLX_FIELD_END(plx_component_desc, model_schema) || desc.model_schema == nullptr)
    return {};
  std::string text = desc.model_schema;
  const ErrorFactory invalid = [&](const std::string& message) {
    return error(label + " has an invalid model schema: " + message);
  };
  try {
    const config::Schema schema = config::Schema::parse(text, "model schema of " + label);
    using config::JsonType;
    const bool object_alone = !schema.allows_any_type() && schema.allows(JsonType::object) &&
                              std::none_of(std::begin(kNonObjectTypes), std::end(kNonObjectTypes),
                                           [&](JsonType t) { return schema.allows(t); });
    if (!object_alone)
      throw invalid("it must be of type \"object\" alone: it describes keys of the model section");
    check_component_kinds(schema, "", invalid);
  } catch (const std::invalid_argument& e) {
    throw invalid(e.what());
  }
  return text;
}

}  // namespace

bool PluginSummary::provides(uint32_t kind, std::string_view component_name) const {
  return std::any_of(components.begin(), components.end(), [&](const auto& component) {
    return component.first == kind && component.second == component_name;
  });
}

struct PluginHost::Loaded {
  boost::dll::shared_library library;  // declared first: unloaded last
  PluginRecord record;
  plx_plugin_descriptor descriptor{};
  std::vector<std::unique_ptr<std::uintptr_t[]>> tables;
  std::vector<std::unique_ptr<Component>> components;
  bool initialized = false;

  ~Loaded() {
    if (initialized && descriptor.shutdown != nullptr) descriptor.shutdown();
  }
};

// A library read by peek(): open for the host's lifetime, never initialized.
struct PluginHost::Peeked {
  boost::dll::shared_library library;
  PluginSummary summary;
};

PluginHost::PluginHost() : services_(std::make_unique<HostServices>()) {}

PluginHost::~PluginHost() {
  while (!loaded_.empty()) loaded_.pop_back();  // reverse load order
  while (!peeked_.empty()) peeked_.pop_back();
}

HostServices& PluginHost::services() noexcept {
  return *services_;
}
HostServices& PluginHost::services() const noexcept {
  return *services_;
}

const PluginSummary& PluginHost::peek(const fs::path& requested, const LoadOptions& options) {
  std::error_code ec;
  fs::path file = fs::absolute(requested, ec);
  if (ec) file = requested;
  for (const auto& peeked : peeked_)
    if (fs::equivalent(peeked->summary.file, file, ec)) return peeked->summary;
  auto peeked = std::make_unique<Peeked>();
  // A loaded plugin is described from its registration: calling its entry again would hand it a
  // second host table, which a C++ plugin would then use for its log lines.
  for (const auto& loaded : loaded_)
    if (fs::equivalent(loaded->record.file, file, ec)) {
      peeked->summary.file = loaded->record.file;
      peeked->summary.name = loaded->record.name;
      peeked->summary.version = loaded->record.version;
      peeked->summary.abi_version = loaded->record.abi_version;
      for (const auto& component : loaded->components)
        peeked->summary.components.emplace_back(component->kind, component->name);
      peeked_.push_back(std::move(peeked));
      return peeked_.back()->summary;
    }
  const std::string name = file.string();
  const ErrorFactory error = [&](const std::string& message) {
    return PluginError(name, "plugin '" + name + "': " + message);
  };
  OpenedPlugin opened = open_plugin(file, options, *services_, error);
  peeked->summary.file = file;
  peeked->summary.name = opened.descriptor.name;
  peeked->summary.version = text_or_empty(opened.descriptor.version);
  peeked->summary.abi_version = opened.abi_version;
  for (uint32_t i = 0; i < opened.descriptor.component_count; ++i) {
    const plx_component_desc desc = read_component(opened.descriptor, i, error);
    peeked->summary.components.emplace_back(desc.kind, desc.name);
  }
  peeked->library = std::move(opened.library);
  peeked_.push_back(std::move(peeked));
  return peeked_.back()->summary;
}

const PluginRecord& PluginHost::load(const fs::path& requested, const LoadOptions& options) {
  std::error_code ec;
  fs::path file = fs::absolute(requested, ec);
  if (ec) file = requested;
  const std::string name = file.string();
  const ErrorFactory error = [&](const std::string& message) {
    return PluginError(name, "plugin '" + name + "': " + message);
  };

  for (const auto& other : loaded_)
    if (fs::equivalent(other->record.file, file, ec))
      throw error("already loaded (as plugin '" + other->record.name + "')");

  // 1 and 2: the file, the library, its entry point and ABI version.
  OpenedPlugin opened = open_plugin(file, options, *services_, error);
  auto loaded = std::make_unique<Loaded>();
  loaded->library = std::move(opened.library);
  loaded->record.file = file;
  const plx_plugin_descriptor& descriptor = opened.descriptor;
  const plx_host_api* host_table = opened.host_table;
  const uint32_t plugin_abi = opened.abi_version;
  loaded->descriptor = descriptor;
  loaded->record.name = descriptor.name;
  loaded->record.version = text_or_empty(descriptor.version);
  loaded->record.description = text_or_empty(descriptor.description);
  loaded->record.abi_version = plugin_abi;
  loaded->record.min_host_minor = descriptor.min_host_minor;
  services_->rename(host_table, loaded->record.name);
  for (const auto& other : loaded_)
    if (other->record.name == loaded->record.name)
      throw error("a plugin named '" + loaded->record.name + "' is already loaded from '" +
                  other->record.file.string() + "'");

  // 3. The components: all are checked before any is registered.
  std::set<std::pair<uint32_t, std::string>> seen;
  for (uint32_t i = 0; i < descriptor.component_count; ++i) {
    const plx_component_desc desc = read_component(descriptor, i, error);
    const std::string cname = desc.name;
    const detail::KindInfo* kind = detail::kind_info(desc.kind);
    if (kind == nullptr)
      throw error("component '" + cname + "' has unknown kind " + std::to_string(desc.kind) +
                  "; this host knows: " + detail::known_kinds_list());
    const std::string label = "component '" + cname + "' (" + kind->name + ")";
    if (desc.table == nullptr) throw error(label + " has no function table");
    const uint32_t table_size = *static_cast<const uint32_t*>(desc.table);
    auto table = copy_table(desc.table, table_size, kind->table_size);
    for (const detail::RequiredField& field : kind->required) {
      if (table_size < field.end || !pointer_field_set(table.get(), field.end))
        throw error(label + " lacks the required function '" + field.name + "'");
    }
    if (!seen.insert({desc.kind, cname}).second) throw error(label + " is listed twice");
    if (const Component* existing = find(desc.kind, cname); existing != nullptr)
      throw error(label + " is already registered by plugin '" + existing->plugin->name + "' from '" +
                  existing->plugin->file.string() + "'; component names must be unique per kind");
    std::string schema_text = text_or_empty(desc.config_schema);
    if (!schema_text.empty()) {
      try {
        (void)config::Schema::parse(schema_text, "config schema of " + label);
      } catch (const std::exception& e) {
        throw error(label + " has an invalid config schema: " + e.what());
      }
    }
    auto component = std::make_unique<Component>();
    component->kind = desc.kind;
    component->name = cname;
    component->description = text_or_empty(desc.description);
    component->config_schema = std::move(schema_text);
    component->model_schema = checked_model_schema(desc, label, error);
    component->declares_model_keys = desc.struct_size >= PLX_FIELD_END(plx_component_desc, model_schema);
    component->plugin = &loaded->record;
    component->table = table.get();
    component->table_size = std::min<uint32_t>(table_size, static_cast<uint32_t>(kind->table_size));
    loaded->tables.push_back(std::move(table));
    loaded->components.push_back(std::move(component));
  }

  // 4. Initialization: the plugin may still refuse (missing device, license, ...).
  if (descriptor.init != nullptr) {
    HostServices::clear_last_error();
    if (const plx_status status = descriptor.init(host_table); status != PLX_OK) {
      std::string message = HostServices::take_last_error();
      throw error("failed to initialize: " + std::string(plx_status_name(status)) +
                  (message.empty() ? std::string() : ": " + message));
    }
  }
  loaded->initialized = true;
  if (PLX_VERSION_MINOR(plugin_abi) != PLX_ABI_MINOR)
    Logger::global().log(LogLevel::debug, "plugin-host",
                         "plugin '" + loaded->record.name + "' built against ABI " + version_string(plugin_abi) +
                             " runs on host ABI " + version_string(PLX_ABI_VERSION));
  loaded_.push_back(std::move(loaded));
  return loaded_.back()->record;
}

const Component* PluginHost::find(uint32_t kind, std::string_view name) const {
  for (const auto& plugin : loaded_)
    for (const auto& component : plugin->components)
      if (component->kind == kind && component->name == name) return component.get();
  return nullptr;
}

const Component& PluginHost::get(uint32_t kind, std::string_view name) const {
  if (const Component* found = find(kind, name); found != nullptr) return *found;
  std::vector<std::string> names;
  for (const Component* component : components())
    if (component->kind == kind) names.push_back(component->name);
  std::string message = std::string("no ") + kind_name(kind) + " component named '" + std::string(name) + "' is loaded";
  if (const auto nearest = config::nearest(name, names); nearest) message += " (did you mean '" + *nearest + "'?)";
  if (names.empty()) {
    message += "; no plugin loaded so far provides a " + std::string(kind_name(kind));
  } else {
    message += "; loaded: ";
    for (std::size_t i = 0; i < names.size(); ++i) message += (i > 0 ? ", " : "") + names[i];
  }
  throw PluginError("", message);
}

std::vector<const PluginRecord*> PluginHost::plugins() const {
  std::vector<const PluginRecord*> records;
  for (const auto& plugin : loaded_) records.push_back(&plugin->record);
  return records;
}

std::vector<const Component*> PluginHost::components() const {
  std::vector<const Component*> all;
  for (const auto& plugin : loaded_)
    for (const auto& component : plugin->components) all.push_back(component.get());
  return all;
}

std::vector<const Component*> PluginHost::components_of(const PluginRecord& record) const {
  std::vector<const Component*> list;
  for (const auto& plugin : loaded_)
    if (&plugin->record == &record)
      for (const auto& component : plugin->components) list.push_back(component.get());
  return list;
}

}  // namespace plexus

// Loading a plugin, step by step; each step that can fail says which file and what.
#include "plexus/core/plugin_host.hpp"

#include <cstring>
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

}  // namespace

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

PluginHost::PluginHost() : services_(std::make_unique<HostServices>()) {}

PluginHost::~PluginHost() {
  while (!loaded_.empty()) loaded_.pop_back();  // reverse load order
}

HostServices& PluginHost::services() noexcept { return *services_; }
HostServices& PluginHost::services() const noexcept { return *services_; }

const PluginRecord& PluginHost::load(const fs::path& requested, const LoadOptions& options) {
  std::error_code ec;
  fs::path file = fs::absolute(requested, ec);
  if (ec) file = requested;
  const std::string name = file.string();
  const auto error = [&](const std::string& message) { return PluginError(name, "plugin '" + name + "': " + message); };

  if (!fs::exists(file, ec)) throw error("file does not exist");
  if (!fs::is_regular_file(file, ec)) throw error("not a regular file");
  if (!options.allow_world_writable) detail::check_not_world_writable(file);
  for (const auto& other : loaded_)
    if (fs::equivalent(other->record.file, file, ec))
      throw error("already loaded (as plugin '" + other->record.name + "')");

  auto loaded = std::make_unique<Loaded>();
  loaded->library = detail::open_library(file);
  loaded->record.file = file;

  // 1. The entry point.
  if (!loaded->library.has(PLX_ENTRY_SYMBOL)) {
    std::string hint;
    for (int major = 0; major <= 9; ++major) {
      const std::string other = "plexus_plugin_entry_v" + std::to_string(major);
      if (other != PLX_ENTRY_SYMBOL && loaded->library.has(other)) hint = " (it exports " + other + ")";
    }
    throw error(std::string("not a Plexus plugin: it does not export the entry symbol ") +
                PLX_ENTRY_SYMBOL + hint);
  }
  const auto entry = loaded->library.get<plx_status(const plx_host_api*, const plx_plugin_descriptor**)>(
      PLX_ENTRY_SYMBOL);
  const plx_host_api* host_table = services_->table_for(file.stem().string());
  const plx_plugin_descriptor* raw = nullptr;
  HostServices::clear_last_error();
  if (const plx_status status = entry(host_table, &raw); status != PLX_OK)
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
  if (descriptor.component_count > 0 && descriptor.components == nullptr)
    throw error("descriptor lists " + std::to_string(descriptor.component_count) + " components but no array");
  if (descriptor.component_count > 4096) throw error("descriptor lists an implausible number of components");
  std::set<std::pair<uint32_t, std::string>> seen;
  for (uint32_t i = 0; i < descriptor.component_count; ++i) {
    const plx_component_desc* raw_desc = descriptor.components[i];
    const std::string where = "component #" + std::to_string(i);
    if (raw_desc == nullptr) throw error(where + " is NULL");
    if (raw_desc->struct_size < PLX_FIELD_END(plx_component_desc, table))
      throw error(where + " has a malformed descriptor (struct_size " + std::to_string(raw_desc->struct_size) + ")");
    const plx_component_desc desc = read_struct(raw_desc);
    if (!valid_name(desc.name))
      throw error(where + " has an invalid name '" + text_or_empty(desc.name) +
                  "' (use letters, digits, '_', '.', '-')");
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

// The plugin host: loads plugin libraries, negotiates the ABI, validates descriptors and
// registers components by (kind, name).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plexus/core/errors.hpp"
#include "plexus/plugin.h"

namespace plexus {

class HostServices;

struct LoadOptions {
  // Refusing plugin files or directories that others may write is the default: such a file
  // could be replaced by any local user and would run inside every training job.
  bool allow_world_writable = false;
};

// What the host knows about one loaded plugin.
struct PluginRecord {
  std::filesystem::path file;
  std::string name;
  std::string version;
  std::string description;
  uint32_t abi_version = 0;     // what the plugin was built against
  uint32_t min_host_minor = 0;  // what it needs of the host
};

// One registered component. `table` points to a host-side copy of the plugin's table, zero
// extended to this host's size, so fields the plugin's SDK did not have read as NULL.
struct Component {
  uint32_t kind = 0;
  std::string name;
  std::string description;
  std::string config_schema;  // JSON text, empty when the component takes no config
  // The keys it adds to the run config's model section (plx_component_desc.model_schema, ABI 1.6):
  // JSON text of an object schema, checked when the plugin loaded; empty when it adds none.
  std::string model_schema;
  // Its plugin's SDK has the model_schema field (ABI 1.6 or newer), so an empty one means "adds no
  // keys"; a stack built before cannot say which model keys it reads.
  bool declares_model_keys = false;
  const PluginRecord* plugin = nullptr;
  const void* table = nullptr;
  uint32_t table_size = 0;  // what both sides know: min(plugin struct_size, host sizeof)

  template <class Table>
  const Table& as() const {
    return *static_cast<const Table*>(table);
  }
};

// What a plugin file says about itself, read without registering or initializing it (PluginHost::peek).
struct PluginSummary {
  std::filesystem::path file;
  std::string name;
  std::string version;
  uint32_t abi_version = 0;
  std::vector<std::pair<uint32_t, std::string>> components;  // (kind, name), as the descriptor lists them

  [[nodiscard]] bool provides(uint32_t kind, std::string_view component_name) const;
};

const char* kind_name(uint32_t kind) noexcept;              // "layer", "fusion_backend", ...
std::optional<uint32_t> kind_from_name(std::string_view name) noexcept;

class PluginHost {
 public:
  PluginHost();
  ~PluginHost();  // shuts down and unloads plugins in reverse load order
  PluginHost(const PluginHost&) = delete;
  PluginHost& operator=(const PluginHost&) = delete;

  // Loads one plugin library. Throws PluginError naming the file and the problem; on error
  // nothing of the plugin stays registered or loaded.
  const PluginRecord& load(const std::filesystem::path& file, const LoadOptions& options = {});

  // Reads a plugin file's descriptor the way load() does up to the ABI check (the file and its
  // permissions, ELF and dlopen, the entry symbol, the ABI version) and lists its components,
  // without checking them further, registering anything or calling the plugin's init. Throws
  // PluginError with load()'s messages. Each file is read once per host; the library stays open
  // until the host is destroyed, like a loaded one (unloading a library whose dependencies pinned
  // themselves, OpenMP's or CUDA's runtime, is not safe), and load() of it later opens it again.
  const PluginSummary& peek(const std::filesystem::path& file, const LoadOptions& options = {});

  // The component (kind, name), loading the plugin that provides it when no loaded one does. The
  // provider is found by reading descriptors (peek), never by a table of names: first the plugin
  // the naming convention suggests ("mamba.mixer" in plugin "mamba", "hybrid_stack" in
  // "hybrid_stack"), wherever it is on the search path; then every other libplexus_*.so in the
  // search path's order (within a directory, files whose names mention the component or its kind
  // first, which only saves reading the others). Throws PluginError naming the component, every
  // plugin file looked at with what it provides of that kind or why it could not be read, and the
  // nearest name found; or load()'s error when the provider does not load.
  const Component& load_provider(uint32_t kind, std::string_view name,
                                 const std::vector<std::filesystem::path>& search_path,
                                 const LoadOptions& options = {});

  // The component registered under (kind, name), or nullptr.
  const Component* find(uint32_t kind, std::string_view name) const;
  // Like find, but throws PluginError listing the registered names of that kind (and the
  // nearest one) when absent.
  const Component& get(uint32_t kind, std::string_view name) const;

  std::vector<const PluginRecord*> plugins() const;
  std::vector<const Component*> components() const;  // in registration order
  std::vector<const Component*> components_of(const PluginRecord& plugin) const;

  HostServices& services() noexcept;
  // The services are the plugins' shared runtime state (logging, errors, the metric sink), not
  // part of the registry: a host whose registry is read-only still routes its plugins' metrics.
  HostServices& services() const noexcept;

 private:
  struct Loaded;
  struct Peeked;
  std::vector<std::unique_ptr<Loaded>> loaded_;
  std::vector<std::unique_ptr<Peeked>> peeked_;  // closed after loaded_, in the destructor
  std::unique_ptr<HostServices> services_;
};

// The directories searched for plugins, in order: explicit ones (command line, then config
// "plugins.paths"), PLEXUS_PLUGIN_PATH (colon-separated), the directory beside the running
// executable (../lib/plexus/plugins, which covers both the build tree and an install), and the
// install prefix compiled into the core.
std::vector<std::filesystem::path> plugin_search_path(const std::vector<std::filesystem::path>& explicit_dirs);

// The plugin libraries in a directory (files ending in ".so"), sorted by name.
std::vector<std::filesystem::path> plugin_files_in(const std::filesystem::path& dir);

// The Plexus plugins in a directory (libplexus_<name>.so, what resolve_plugin finds by name),
// sorted by name: the files load_provider reads, leaving other libraries (a plugin's own
// dependencies, say) unopened.
std::vector<std::filesystem::path> plexus_plugin_files_in(const std::filesystem::path& dir);

// Resolves a plugin reference from a config: a path (contains '/' or ends in ".so") is used as
// is; a bare name N is looked up as libplexus_N.so in the search path. Throws PluginError
// listing the directories searched.
std::filesystem::path resolve_plugin(std::string_view reference,
                                     const std::vector<std::filesystem::path>& search_path);

}  // namespace plexus

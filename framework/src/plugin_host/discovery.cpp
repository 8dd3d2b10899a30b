// Finding the plugin that provides a component by reading plugin descriptors: a config names
// components, not plugins, and which plugin holds which component is the plugins' own word.
#include <algorithm>
#include <string>
#include <system_error>
#include <vector>

#include "plexus/core/config.hpp"
#include "plexus/core/logging.hpp"
#include "plexus/core/plugin_host.hpp"

namespace fs = std::filesystem;

namespace plexus {
namespace {

constexpr std::string_view kPrefix = "libplexus_";

// "libplexus_comm_mpi.so" -> "comm_mpi".
std::string plugin_name_of(const fs::path& file) {
  const std::string stem = file.stem().string();
  return stem.substr(std::min(stem.size(), kPrefix.size()));
}

// The plugin the naming convention suggests: the component's name up to its first '.'.
std::string conventional_plugin(std::string_view component) {
  return std::string(component.substr(0, component.find('.')));
}

// Which files to read first. The names only order the reading (a file that mentions the component
// or its kind is likely to hold it: "comm_mpi" for the comm "mpi", "topology_default" for a
// topology); what a plugin provides is always read from its descriptor.
int hint_rank(const std::string& plugin, uint32_t kind, std::string_view component) {
  if (plugin == conventional_plugin(component)) return 0;
  if (!component.empty() && plugin.find(component) != std::string::npos) return 1;
  if (plugin.find(kind_name(kind)) != std::string::npos) return 2;
  return 3;
}

struct Candidate {
  fs::path file;
  int rank = 3;
  std::size_t dir = 0;
};

std::vector<Candidate> candidates(const std::vector<fs::path>& search_path, uint32_t kind,
                                  std::string_view name) {
  std::vector<Candidate> list;
  for (std::size_t d = 0; d < search_path.size(); ++d)
    for (const fs::path& file : plexus_plugin_files_in(search_path[d]))
      list.push_back({file, hint_rank(plugin_name_of(file), kind, name), d});
  // The convention's plugin first, wherever it is on the path (as a name in plugins.load would be
  // found); then the search path's order, and within a directory the likelier files first.
  std::stable_sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) {
    const bool a_conventional = a.rank == 0;
    const bool b_conventional = b.rank == 0;
    if (a_conventional != b_conventional) return a_conventional;
    if (a.dir != b.dir) return a.dir < b.dir;
    return a.rank < b.rank;
  });
  return list;
}

bool is_loaded(const PluginHost& host, const fs::path& file) {
  for (const PluginRecord* record : host.plugins()) {
    std::error_code ec;
    if (fs::equivalent(record->file, file, ec)) return true;
  }
  return false;
}

const PluginRecord* loaded_named(const PluginHost& host, const std::string& name) {
  for (const PluginRecord* record : host.plugins())
    if (record->name == name) return record;
  return nullptr;
}

// "transformer.attention, transformer.mlp" of `kind` in a summary, or "no <kind>".
std::string provided_of_kind(const PluginSummary& summary, uint32_t kind, std::vector<std::string>& seen) {
  std::string names;
  for (const auto& [k, component] : summary.components) {
    if (k != kind) continue;
    names += (names.empty() ? "" : ", ") + component;
    seen.push_back(component);
  }
  return names.empty() ? "no " + std::string(kind_name(kind)) : std::string(kind_name(kind)) + " " + names;
}

}  // namespace

const Component& PluginHost::load_provider(uint32_t kind, std::string_view name,
                                           const std::vector<fs::path>& search_path,
                                           const LoadOptions& options) {
  if (const Component* found = find(kind, name)) return *found;
  const std::string what = std::string("the ") + kind_name(kind) + " component '" + std::string(name) + "'";
  std::vector<std::string> seen;  // names of that kind found anywhere, for the suggestion
  for (const Component* component : components())
    if (component->kind == kind) seen.push_back(component->name);
  std::string looked_at;
  for (const Candidate& candidate : candidates(search_path, kind, name)) {
    if (is_loaded(*this, candidate.file)) continue;  // loaded, and find() says it does not provide it
    const PluginSummary* summary = nullptr;
    try {
      summary = &peek(candidate.file, options);
    } catch (const PluginError& e) {
      looked_at += "\n  " + candidate.file.string() + ": could not be read: " + e.what();
      continue;
    }
    Logger::global().log(LogLevel::debug, "plugin-host",
                         "read the descriptor of " + candidate.file.string() + " looking for " + what);
    if (!summary->provides(kind, name)) {
      looked_at += "\n  " + candidate.file.string() + " (plugin " + summary->name +
                   "): " + provided_of_kind(*summary, kind, seen);
      continue;
    }
    if (const PluginRecord* same_name = loaded_named(*this, summary->name)) {
      looked_at += "\n  " + candidate.file.string() + " (plugin " + summary->name +
                   ") provides it, but a plugin named '" + summary->name + "' is already loaded from " +
                   same_name->file.string();
      continue;
    }
    const PluginRecord& record = load(candidate.file, options);
    if (const Component* found = find(kind, name)) return *found;
    // The descriptor changed between the two reads: say so rather than guess.
    throw PluginError(record.file.string(), "plugin '" + record.file.string() + "' listed " + what +
                                                " when read, but did not register it when loaded");
  }
  std::string message = "no plugin provides " + what;
  if (const auto nearest = config::nearest(name, seen)) message += " (did you mean '" + *nearest + "'?)";
  std::string loaded;
  for (const PluginRecord* record : plugins()) loaded += (loaded.empty() ? "" : ", ") + record->name;
  message += ": the loaded plugins (" + (loaded.empty() ? std::string("none") : loaded) + ") do not, ";
  if (looked_at.empty()) {
    std::string dirs;
    for (const fs::path& dir : search_path) dirs += "\n  " + dir.string();
    message +=
        "and no other libplexus_*.so is in the plugin search path:" + (dirs.empty() ? "\n  (empty)" : dirs);
  } else {
    message += "nor does any other plugin in the search path:" + looked_at;
  }
  message +=
      "\nAdd the plugin's directory with --plugin-path, the config key plugins.paths or PLEXUS_PLUGIN_PATH, "
      "or name its file in plugins.load.";
  throw PluginError(std::string(name), message);
}

}  // namespace plexus

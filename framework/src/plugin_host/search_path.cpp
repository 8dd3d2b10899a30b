// Where plugins are found.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <system_error>

#define BOOST_DLL_USE_STD_FS
#include <boost/dll/runtime_symbol_info.hpp>

#include "plexus/core/plugin_host.hpp"

namespace fs = std::filesystem;

namespace plexus {
namespace {

void add_unique(std::vector<fs::path>& dirs, const fs::path& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  const fs::path normal = fs::weakly_canonical(dir, ec);
  const fs::path& key = ec ? dir : normal;
  if (std::find(dirs.begin(), dirs.end(), key) == dirs.end()) dirs.push_back(key);
}

}  // namespace

std::vector<fs::path> plugin_search_path(const std::vector<fs::path>& explicit_dirs) {
  std::vector<fs::path> dirs;
  for (const fs::path& dir : explicit_dirs) add_unique(dirs, dir);
  if (const char* env = std::getenv("PLEXUS_PLUGIN_PATH"); env != nullptr) {
    const std::string value = env;
    std::size_t start = 0;
    while (start <= value.size()) {
      const std::size_t end = std::min(value.find(':', start), value.size());
      add_unique(dirs, value.substr(start, end - start));
      start = end + 1;
    }
  }
  // Beside the running program: build/bin -> build/lib/plexus/plugins, and the same for an
  // installed prefix/bin -> prefix/lib/plexus/plugins. Relocatable, no compiled-in paths.
  std::error_code ec;
  const fs::path program = boost::dll::program_location(ec);
  if (!ec) add_unique(dirs, program.parent_path().parent_path() / "lib" / "plexus" / "plugins");
  add_unique(dirs, PLEXUS_INSTALL_PLUGIN_DIR);
  return dirs;
}

std::vector<fs::path> plugin_files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".so" && it->is_regular_file(ec)) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<fs::path> plexus_plugin_files_in(const fs::path& dir) {
  constexpr std::string_view prefix = "libplexus_";
  std::vector<fs::path> files = plugin_files_in(dir);
  std::erase_if(files, [&](const fs::path& file) {
    const std::string stem = file.stem().string();
    return stem.size() <= prefix.size() || stem.compare(0, prefix.size(), prefix) != 0;
  });
  return files;
}

fs::path resolve_plugin(std::string_view reference, const std::vector<fs::path>& search_path) {
  const std::string ref(reference);
  if (ref.find('/') != std::string::npos || fs::path(ref).extension() == ".so") return fs::path(ref);
  const std::string file = "libplexus_" + ref + ".so";
  std::string searched;
  for (const fs::path& dir : search_path) {
    std::error_code ec;
    if (fs::exists(dir / file, ec)) return dir / file;
    searched += "\n  " + dir.string();
  }
  throw PluginError(file, "plugin '" + ref + "' not found: no " + file + " in the plugin search path:" +
                              (searched.empty() ? std::string("\n  (empty)") : searched) +
                              "\nAdd a directory with --plugin-path, the config key plugins.paths, "
                              "or PLEXUS_PLUGIN_PATH.");
}

}  // namespace plexus

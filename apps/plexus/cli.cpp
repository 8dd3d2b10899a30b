#include "plexus/cli.hpp"

#include <exception>
#include <iostream>

namespace plexus::cli {

void PluginOptions::add_to(po::options_description& options) {
  options.add_options()("plugin-path", po::value(&paths)->composing(),
                        "directory searched for plugins before PLEXUS_PLUGIN_PATH and the install dir (repeatable)")(
      "allow-world-writable-plugins", po::bool_switch(&allow_world_writable),
      "load plugin files or directories that other users may write");
}

std::vector<std::filesystem::path> PluginOptions::dirs() const { return {paths.begin(), paths.end()}; }

int run_guarded(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const po::error& e) {
    std::cerr << program << ": error: " << e.what() << "\n(see " << program << " --help)\n";
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
  }
  return 1;
}

}  // namespace plexus::cli

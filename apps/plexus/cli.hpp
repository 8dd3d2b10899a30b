// Pieces shared by the command-line tools: option groups and uniform error reporting.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace plexus::cli {

namespace po = boost::program_options;

// --plugin-path DIR (repeatable) and --allow-world-writable-plugins.
struct PluginOptions {
  std::vector<std::string> paths;
  bool allow_world_writable = false;
  void add_to(po::options_description& options);
  std::vector<std::filesystem::path> dirs() const;
};

// Runs `body`, printing any exception as "<program>: error: <message>" on stderr; returns the
// exit status (1 on error). Messages from the core already name the file, key or plugin.
int run_guarded(const std::string& program, const std::function<int()>& body);

}  // namespace plexus::cli

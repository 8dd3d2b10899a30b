// `plexus-train`: the reference trainer. This version prepares a run completely (config,
// overrides, plugins, components) and stops before the training loop, which the engine adds.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "plexus/cli.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

int main(int argc, char** argv) {
  namespace po = plexus::cli::po;
  return plexus::cli::run_guarded("plexus-train", [&] {
    plexus::cli::PluginOptions plugin_options;
    std::string config_file;
    std::vector<std::string> overrides;
    bool help = false;
    po::options_description options("usage: plexus-train --config FILE [--set KEY=VALUE]...\n\noptions");
    plugin_options.add_to(options);
    options.add_options()("config", po::value(&config_file), "run config (JSON); the embedded default when omitted")(
        "set", po::value(&overrides)->composing(), "override a key, e.g. --set train.steps=50 (repeatable)")(
        "help,h", po::bool_switch(&help), "this help");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, options), vm);
    po::notify(vm);
    if (help) {
      std::cout << options;
      return 0;
    }
    std::optional<std::filesystem::path> file;
    if (!config_file.empty()) file = config_file;
    boost::json::value run_config = plexus::load_run_config(file, overrides);
    plexus::PluginHost host;
    plexus::load_configured_plugins(host, run_config, {plugin_options.dirs(), plugin_options.allow_world_writable});
    plexus::check_components(host, run_config);
    std::cerr << "plexus-train: config and plugins are valid, but this build has no training engine yet; "
                 "nothing was trained\n";
    return 2;
  });
}

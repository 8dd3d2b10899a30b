// `plexus config check|show`: validates a run config, loads the plugins it names and
// validates each component's options against that component's own schema.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "plexus/cli.hpp"
#include "plexus/commands.hpp"
#include "plexus/core/engine/mimo_trainer.hpp"
#include "plexus/core/json_text.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus::cli {
namespace {

constexpr const char* kHelp = R"(usage: plexus config check FILE|--default [options]
       plexus config show  FILE|--default [options]

check: validates FILE (or the embedded default run config), applies every --set override,
       loads the plugins it names and validates each component's options. Every problem is
       reported with its JSON path. Exit status 0 when valid, 1 otherwise.
show:  the same, then prints the config with every default filled in.
)";

}  // namespace

int config_command(const std::vector<std::string>& args) {
  return run_guarded("plexus config", [&] {
    if (args.empty() || (args[0] != "check" && args[0] != "show")) {
      std::cerr << "plexus config: error: expected 'check' or 'show'\n\n" << kHelp;
      return 1;
    }
    const bool show = args[0] == "show";
    PluginOptions plugin_options;
    std::vector<std::string> files;
    std::vector<std::string> overrides;
    bool use_default = false;
    bool help = false;
    po::options_description options("options");
    plugin_options.add_to(options);
    options.add_options()("set", po::value(&overrides)->composing(), "override a key: --set train.steps=50 (repeatable)")(
        "default", po::bool_switch(&use_default), "use the embedded default config")(
        "help,h", po::bool_switch(&help), "this help");
    po::options_description hidden;
    hidden.add_options()("file", po::value(&files));
    po::options_description all;
    all.add(options).add(hidden);
    po::positional_options_description positional;
    positional.add("file", -1);
    po::variables_map vm;
    po::store(po::command_line_parser(std::vector<std::string>(args.begin() + 1, args.end()))
                  .options(all)
                  .positional(positional)
                  .run(),
              vm);
    po::notify(vm);
    if (help) {
      std::cout << kHelp << "\n" << options;
      return 0;
    }
    if (files.size() + (use_default ? 1 : 0) != 1) {
      std::cerr << "plexus config: error: give exactly one config: a FILE or --default\n";
      return 1;
    }
    std::optional<std::filesystem::path> file;
    if (!use_default) file = files.front();
    const std::string label = file ? file->string() : std::string("<embedded default config>");
    boost::json::value run_config = load_run_config(file, overrides);
    PluginHost host;
    load_configured_plugins(host, run_config, {plugin_options.dirs(), plugin_options.allow_world_writable});
    check_components(host, run_config);
    check_mimo_modules(host, run_config, {plugin_options.dirs(), plugin_options.allow_world_writable});
    if (show) {
      std::cout << json_text(run_config, 2) << "\n";
    } else {
      std::cout << label << ": valid";
      std::cout << " (" << host.plugins().size() << " plugin" << (host.plugins().size() == 1 ? "" : "s") << " loaded";
      for (const ComponentRef& ref : component_refs(host, run_config))
        std::cout << "; " << ref.section << ": " << ref.name;
      std::cout << ")\n";
    }
    return 0;
  });
}

}  // namespace plexus::cli

// `plexus topology WORLD_SIZE`: the process groups the run config's topology provider
// (distributed.topology) makes of a world of that many ranks, kind by kind, without starting
// any process; so a layout can be checked before a job is queued.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "plexus/cli.hpp"
#include "plexus/commands.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: plexus topology WORLD_SIZE [--config FILE] [--set KEY=VALUE]... [--json]

Prints every process group the topology provider of the run config (distributed.topology, the
"grid" of plugin topology_default by default) makes of WORLD_SIZE ranks: for each kind (tp, cp,
dp, pp, ep, ...), its groups as world ranks in group-rank order. For example
  plexus topology 16 --set 'distributed.topology.options={"tp": 2, "pp": 4}'
A world that does not factor is refused naming the sizes, as plexus-train would refuse it.
)";

std::string ranks_text(const std::vector<int32_t>& ranks) {
  std::string text = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text + "]";
}

}  // namespace

int topology_command(const std::vector<std::string>& args) {
  return run_guarded("plexus topology", [&] {
    PluginOptions plugin_options;
    std::string config_file;
    std::vector<std::string> overrides;
    int64_t world_size = 0;
    bool json = false;
    bool help = false;
    po::options_description options("options");
    plugin_options.add_to(options);
    options.add_options()("config", po::value(&config_file),
                          "run config (JSON); the embedded default when omitted")(
        "set", po::value(&overrides)->composing(), "override a key (repeatable)")(
        "json", po::bool_switch(&json), "print {kind: [[ranks], ...]} as JSON")(
        "help,h", po::bool_switch(&help), "this help");
    po::options_description hidden;
    hidden.add_options()("world-size", po::value(&world_size));
    po::options_description all;
    all.add(options).add(hidden);
    po::positional_options_description positional;
    positional.add("world-size", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    po::notify(vm);
    if (help) {
      std::cout << kHelp << "\n" << options;
      return 0;
    }
    if (world_size < 1 || world_size > (int64_t{1} << 24)) {
      std::cerr << "plexus topology: error: WORLD_SIZE must be a number of ranks from 1 to 16777216\n\n"
                << kHelp;
      return 1;
    }
    std::optional<std::filesystem::path> file;
    if (!config_file.empty()) file = config_file;
    const boost::json::value run_config = load_run_config(file, overrides);
    PluginHost host;
    const PluginLoadOptions load{plugin_options.dirs(), plugin_options.allow_world_writable};
    const distributed::Topology topology =
        distributed::enumerate_topology(host, run_config, load, static_cast<int32_t>(world_size));
    if (json) {
      boost::json::object out;
      for (const std::string& kind : topology.kinds) {
        boost::json::array groups;
        for (const auto& group : topology.groups.at(kind))
          groups.emplace_back(boost::json::value_from(group));
        out[kind] = std::move(groups);
      }
      std::cout << boost::json::serialize(out) << "\n";
      return 0;
    }
    std::cout << world_size << " ranks, topology '"
              << std::string(run_config.at("distributed").at("topology").at("component").as_string())
              << "' with options "
              << boost::json::serialize(run_config.at("distributed").at("topology").at("options")) << "\n";
    for (const std::string& kind : topology.kinds) {
      const auto& groups = topology.groups.at(kind);
      std::cout << "  " << kind << std::string(kind.size() < 10 ? 10 - kind.size() : 1, ' ') << groups.size()
                << " group(s) of " << groups.front().size() << ": ";
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (g == 8 && groups.size() > 9) {
          std::cout << " ... (" << groups.size() - 8 << " more; --json lists all)";
          break;
        }
        std::cout << (g ? " " : "") << ranks_text(groups[g]);
      }
      std::cout << "\n";
    }
    return 0;
  });
}

}  // namespace plexus::cli

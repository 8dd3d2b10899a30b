// `plexus topology WORLD_SIZE`: the process groups the run config's topology provider
// (distributed.topology) makes of a world of that many ranks, kind by kind, without starting
// any process; so a layout can be checked before a job is queued.
#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
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

With the "mimo" provider (plugin topology_mimo) every module has a grid of its own: its kinds are
printed as <module>/<kind> (images/tp, language/dp, ...), followed by each module's ranks and
sizes and each rank's role (its tp, cp, dp and pp coordinates in each module it runs); with
--json a module's groups nest under it: {"images": {"tp": [[0, 1], [2, 3]], ...}, ...}.
)";

std::string ranks_text(const std::vector<int32_t>& ranks) {
  std::string text = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text + "]";
}

// A kind "<module>/<kind>" of a provider with per-module grids (mimo): the module, or "" for a
// kind of the whole world (grid's "tp").
std::string module_of(const std::string& kind) {
  const auto slash = kind.find('/');
  return slash == std::string::npos ? std::string() : kind.substr(0, slash);
}

// The modules a topology lays out, in the order their kinds came.
std::vector<std::string> modules_of(const distributed::Topology& topology) {
  std::vector<std::string> modules;
  for (const std::string& kind : topology.kinds)
    if (const std::string m = module_of(kind);
        !m.empty() && std::find(modules.begin(), modules.end(), m) == modules.end())
      modules.push_back(m);
  return modules;
}

// Where `rank` sits in the group of `kind` holding it: {position, group size}, or nothing.
std::optional<std::pair<std::size_t, std::size_t>> position_in(const distributed::Topology& topology,
                                                               const std::string& kind, int32_t rank) {
  const auto it = topology.groups.find(kind);
  if (it == topology.groups.end()) return std::nullopt;
  for (const auto& group : it->second)
    if (const auto at = std::find(group.begin(), group.end(), rank); at != group.end())
      return std::pair{static_cast<std::size_t>(at - group.begin()), group.size()};
  return std::nullopt;
}

// The size of the groups of `kind` (they are equal within a module's grid), 0 when absent.
std::size_t size_of(const distributed::Topology& topology, const std::string& kind) {
  const auto it = topology.groups.find(kind);
  return it == topology.groups.end() || it->second.empty() ? 0 : it->second.front().size();
}

// One line per module (its ranks and sizes) and one per rank (its coordinates in each module it
// runs, and whether it is that module's first or last pipeline stage): what each rank does.
void print_module_roles(const distributed::Topology& topology, int64_t world_size) {
  const std::vector<std::string> modules = modules_of(topology);
  std::vector<std::vector<int32_t>> ranks_of(modules.size());
  for (std::size_t m = 0; m < modules.size(); ++m) {
    for (int32_t r = 0; r < world_size; ++r)
      if (position_in(topology, modules[m] + "/pp", r)) ranks_of[m].push_back(r);
  }
  const bool colocated = std::all_of(ranks_of.begin(), ranks_of.end(),
                                     [&](const auto& ranks) { return ranks == ranks_of.front(); });
  std::cout << "modules ("
            << (colocated ? "colocated: every module on every rank" : "non-colocated: each on its own ranks")
            << "):\n";
  for (std::size_t m = 0; m < modules.size(); ++m) {
    const std::string& name = modules[m];
    std::cout << "  " << name << ": ranks [" << ranks_of[m].front() << ", " << ranks_of[m].back() + 1 << ")";
    for (const char* kind : {"tp", "cp", "dp", "pp", "ep", "expert_tp", "expert_dp"})
      if (const std::size_t n = size_of(topology, name + "/" + kind); n > 0)
        std::cout << " " << kind << " " << n;
    std::cout << "\n";
  }
  std::cout << "roles:\n";
  for (int32_t r = 0; r < world_size; ++r) {
    if (r == 64 && world_size > 65) {
      std::cout << "  ... (" << world_size - 64 << " more ranks; --json lists every group)\n";
      break;
    }
    std::cout << "  rank " << r << ":";
    bool first_module = true;
    for (const std::string& name : modules) {
      const auto pp = position_in(topology, name + "/pp", r);
      if (!pp) continue;
      std::cout << (first_module ? " " : "; ") << name;
      first_module = false;
      for (const char* kind : {"tp", "cp", "dp", "pp"})
        if (const auto at = position_in(topology, name + "/" + kind, r))
          std::cout << " " << kind << " " << at->first;
      const bool first = pp->first == 0, last = pp->first + 1 == pp->second;
      if (pp->second > 1 && (first || last)) std::cout << (first ? " (first stage)" : " (last stage)");
    }
    std::cout << "\n";
  }
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
      // A module's kinds ("images/tp") nest under the module: {"images": {"tp": [[0, 1], ...]}}.
      boost::json::object out;
      for (const std::string& kind : topology.kinds) {
        boost::json::array groups;
        for (const auto& group : topology.groups.at(kind))
          groups.emplace_back(boost::json::value_from(group));
        const std::string module = module_of(kind);
        if (module.empty())
          out[kind] = std::move(groups);
        else {
          boost::json::value& of_module = out[module];
          if (!of_module.is_object()) of_module.emplace_object();
          of_module.as_object()[kind.substr(module.size() + 1)] = std::move(groups);
        }
      }
      std::cout << boost::json::serialize(out) << "\n";
      return 0;
    }
    std::cout << world_size << " ranks, topology '"
              << std::string(run_config.at("distributed").at("topology").at("component").as_string())
              << "' with options "
              << boost::json::serialize(run_config.at("distributed").at("topology").at("options")) << "\n";
    // Module kinds ("language/tp_dp_cp_pp") are longer: their column is as wide as the longest.
    std::size_t width = 10;
    if (!modules_of(topology).empty())
      for (const std::string& kind : topology.kinds) width = std::max(width, kind.size() + 1);
    for (const std::string& kind : topology.kinds) {
      const auto& groups = topology.groups.at(kind);
      std::cout << "  " << kind << std::string(kind.size() < width ? width - kind.size() : 1, ' ')
                << groups.size() << " group(s) of " << groups.front().size() << ": ";
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (g == 8 && groups.size() > 9) {
          std::cout << " ... (" << groups.size() - 8 << " more; --json lists all)";
          break;
        }
        std::cout << (g ? " " : "") << ranks_text(groups[g]);
      }
      std::cout << "\n";
    }
    if (!modules_of(topology).empty()) print_module_roles(topology, world_size);
    return 0;
  });
}

}  // namespace plexus::cli

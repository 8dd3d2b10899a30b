// The distributed runtime of one process: the comm backend chosen by the run config (its
// plugin loaded on demand), the world communicator, and the process groups the topology
// provider enumerates (tp, cp, dp, pp, ep, ...), each a communicator of its own.
//
// Every rank constructs it in the same order with the same config; start() is collective.
// A single process runs it too, over the "local" backend, so the trainer has one code path.
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "plexus/core/distributed/communicator.hpp"
#include "plexus/core/distributed/launch_env.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus::distributed {

// The distributed section of a run config, with "auto" resolved.
struct Settings {
  std::string comm;      // component of kind comm: "local", "mpi", "nccl" or a third party's
  double timeout_s = 0;  // 0: no limit
  boost::json::value comm_options;

  // Throws config::ConfigError naming the key.
  static Settings from_run_config(const boost::json::value& run_config, const LaunchEnv& env);
};

// Every group the run config's topology provider (distributed.topology) enumerates for a world
// of `world_size` ranks, by kind in the provider's order; the provider's plugin is loaded on
// demand as Runtime::start does. Throws naming the key or the provider. What `plexus topology`
// prints, and what the runtime creates.
struct Topology {
  std::vector<std::string> kinds;
  std::map<std::string, std::vector<std::vector<int32_t>>, std::less<>> groups;
};
Topology enumerate_topology(PluginHost& host, const boost::json::value& run_config,
                            const PluginLoadOptions& plugin_options, int32_t world_size, int32_t rank = 0);

class Runtime {
 public:
  // Loads what the settings name (comm_<x> / topology_default plugins from the search path
  // when plugins.load did not), creates the world and the groups. Throws naming the key,
  // plugin or rank at fault.
  static std::unique_ptr<Runtime> start(PluginHost& host, const boost::json::value& run_config,
                                        const PluginLoadOptions& plugin_options, const LaunchEnv& env);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const LaunchEnv& launch() const noexcept { return env_; }
  const Settings& settings() const noexcept { return settings_; }
  int32_t rank() const noexcept { return world_->rank(); }
  int32_t world_size() const noexcept { return world_->size(); }
  const Communicator& world() const noexcept { return *world_; }
  // This rank's group of a kind the topology enumerated, or nullptr. While a ModuleGroupScope
  // lives on the thread, a plain kind ("dp") is its module's group ("language/dp") where the
  // topology has one: the engine and the plugins find a MIMO module's groups by the same names.
  const Communicator* group(std::string_view kind) const;
  // The group the parameters are replicated over, whose ranks average their gradients: "dp", or
  // "dp_cp" under context parallelism (cp ranks hold the same parameters and different tokens),
  // or the world when the topology has neither. data_parallel_kind() is its kind's name.
  const Communicator& data_parallel() const;
  std::string data_parallel_kind() const;
  std::vector<std::string> group_kinds() const;
  // Every group of every kind the topology provider enumerated, over the whole world (also those
  // this rank is not in): where a module's other ranks are (MIMO's bridge).
  const Topology& topology() const noexcept { return topology_; }

  // Collective over the world, with the same arguments on every rank: new groups of kind
  // `name` from disjoint lists of world ranks (in group-rank order). Returns this rank's
  // communicator, or nullptr when it is in none; group(name) finds it afterwards. Throws when
  // the name is taken, a rank is out of the world or listed twice, or the ranks disagree.
  const Communicator* create_groups(const std::string& name, const std::vector<std::vector<int32_t>>& groups);

  // Collective: every rank's `payload` must equal rank 0's. Otherwise every rank throws the
  // same message, naming the ranks that differ and the first differing keys of each.
  void check_same(const boost::json::value& payload, std::string_view what) const;

  // Ends the whole job after a fault; never returns.
  [[noreturn]] void abort(const std::string& reason) const noexcept { world_->abort(reason); }

 private:
  Runtime() = default;
  void build_groups(const Topology& topology);

  LaunchEnv env_;
  Settings settings_;
  std::unique_ptr<Communicator> world_;
  std::map<std::string, std::unique_ptr<Communicator>, std::less<>> groups_;
  std::vector<std::string> kinds_;  // in the provider's order
  Topology topology_;
};

// While one lives on a thread, the group names plugins ask for on that thread (group_get: "tp",
// "dp") resolve in `module`'s grid first ("<module>/tp", the mimo topology's kinds), then as
// given: the layers of a MIMO module find their module's groups by the names every layer uses.
// Scopes nest; the innermost wins.
class ModuleGroupScope {
 public:
  explicit ModuleGroupScope(std::string module);
  ~ModuleGroupScope();
  ModuleGroupScope(const ModuleGroupScope&) = delete;
  ModuleGroupScope& operator=(const ModuleGroupScope&) = delete;
  // The innermost scope's module on this thread, or "".
  static const std::string& current() noexcept;

 private:
  std::string previous_;
};

// The leaves where two JSON values differ, as "path: a vs b", at most `limit` of them.
std::vector<std::string> json_differences(const boost::json::value& a, const boost::json::value& b,
                                          std::size_t limit);

}  // namespace plexus::distributed

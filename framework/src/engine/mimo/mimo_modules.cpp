// The modules of a MIMO model and this rank's part of each (mimo_modules.hpp), and the checks of
// the encoders' model sections (check_mimo_modules).
#include "engine/mimo/mimo_modules.hpp"

#include <algorithm>
#include <set>
#include <string>

#include "plexus/core/config.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/mimo_trainer.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus {
namespace {

std::string module_path(std::size_t index) {
  return "mimo.modules[" + std::to_string(index) + "]";
}

}  // namespace

config::ConfigError at_module(const config::ConfigError& e, const std::string& module_path) {
  if (module_path == "model") return e;
  std::vector<config::Problem> problems;
  for (const config::Problem& p : e.problems()) {
    const bool in_model =
        p.path == "model" || p.path.rfind("model.", 0) == 0 || p.path.rfind("model[", 0) == 0;
    problems.push_back({in_model ? module_path + "." + p.path : p.path, p.message});
  }
  return config::ConfigError(std::move(problems));
}

bool is_mimo(const boost::json::value& run_config) {
  const auto* mimo = run_config.as_object().if_contains("mimo");
  if (mimo == nullptr || !mimo->is_object()) return false;
  const auto* modules = mimo->as_object().if_contains("modules");
  return modules != nullptr && modules->is_array() && !modules->as_array().empty();
}

boost::json::value encoder_run_config(const boost::json::value& run_config, std::size_t index) {
  boost::json::value rc = run_config;
  boost::json::object& root = rc.as_object();
  root["model"] = run_config.at("mimo").at("modules").as_array().at(index).at("model");
  root["mimo"] = boost::json::object{{"modules", boost::json::array()}};
  // The run's plugins are loaded once, by the run config itself; an encoder's section loads only
  // what it needs beyond them, on demand.
  if (auto* plugins = root.if_contains("plugins"); plugins != nullptr && plugins->is_object())
    plugins->as_object()["load"] = boost::json::array();
  // distributed.pipeline shapes the language model's stages; an encoder's layers, which are not
  // the language model's, are split evenly over its stages.
  if (auto* distributed = root.if_contains("distributed"); distributed != nullptr && distributed->is_object())
    distributed->as_object().erase("pipeline");
  return rc;
}

void check_mimo_modules(PluginHost& host, boost::json::value& run_config, const PluginLoadOptions& options) {
  if (!is_mimo(run_config)) return;
  boost::json::array& modules = run_config.at("mimo").at("modules").as_array();
  std::set<std::string> names{kLanguageModule};
  for (std::size_t i = 0; i < modules.size(); ++i) {
    const std::string name(modules[i].at("name").as_string());
    if (name.empty() || name.find_first_of("/ ") != std::string::npos || !names.insert(name).second)
      throw config::ConfigError(module_path(i) + ".name",
                                "'" + name + "' cannot name a modality: names must be unique, not \"" +
                                    std::string(kLanguageModule) + "\", without '/' or spaces");
    boost::json::value rc = encoder_run_config(run_config, i);
    try {
      config::validate(rc, framework_schema());
      load_configured_plugins(host, rc, options);
      check_components(host, rc);
    } catch (const config::ConfigError& e) {
      throw at_module(e, module_path(i));
    }
    modules[i].as_object()["model"] = rc.at("model");  // its defaults filled in
  }
}

std::vector<MimoModule> mimo_modules(const boost::json::value& run_config,
                                     const distributed::Runtime* runtime) {
  std::vector<MimoModule> modules;
  const boost::json::array& encoders = run_config.at("mimo").at("modules").as_array();
  for (std::size_t i = 0; i < encoders.size(); ++i) {
    MimoModule m;
    m.name = std::string(encoders[i].at("name").as_string());
    m.path = module_path(i);
    m.encoder = true;
    m.encoder_name = std::string(encoders[i].at("encoder").as_string());
    m.special_token = static_cast<int32_t>(encoders[i].at("special_token_id").to_number<int64_t>());
    m.run_config = encoder_run_config(run_config, i);
    m.name_prefix = "modality_submodules." + m.name + ".encoders." + m.encoder_name + ".";
    m.head_name_prefix = "modality_submodules." + m.name + ".input_projections.0.";
    modules.push_back(std::move(m));
  }
  MimoModule language;
  language.name = kLanguageModule;
  language.path = "model";
  language.run_config = run_config;
  language.name_prefix = "language_model.";
  modules.push_back(std::move(language));

  const bool one_rank = runtime == nullptr || runtime->world_size() == 1;
  std::set<std::string> laid_out;
  if (runtime != nullptr)
    for (const std::string& kind : runtime->group_kinds())
      if (const auto slash = kind.find('/'); slash != std::string::npos)
        laid_out.insert(kind.substr(0, slash));
  if (laid_out.empty()) {
    if (!one_rank)
      throw config::ConfigError(
          "distributed.topology.component",
          "a MIMO model (mimo.modules) on " + std::to_string(runtime->world_size()) +
              " ranks needs the \"mimo\" topology, which lays each module out on ranks of "
              "its own (docs/mimo.md); one process runs every module on rank 0");
    for (MimoModule& m : modules) {
      m.here = true;
      m.lane_rank = {0};
      m.stage_rank = {0};
    }
    return modules;
  }
  // Megatron's check of the grid map: its keys are the modalities and "language".
  std::set<std::string> named;
  for (const MimoModule& m : modules) named.insert(m.name);
  std::string missing, extra;
  for (const std::string& n : named)
    if (!laid_out.count(n)) missing += (missing.empty() ? "" : ", ") + n;
  for (const std::string& n : laid_out)
    if (!named.count(n)) extra += (extra.empty() ? "" : ", ") + n;
  if (!missing.empty() || !extra.empty())
    throw config::ConfigError("distributed.topology.options.modules",
                              "the topology's modules must be mimo.modules' names and \"language\"" +
                                  (missing.empty() ? std::string() : "; missing: " + missing) +
                                  (extra.empty() ? std::string() : "; not in mimo.modules: " + extra));
  const distributed::Topology& topology = runtime->topology();
  const auto groups_of = [&](const std::string& kind) -> const std::vector<std::vector<int32_t>>& {
    static const std::vector<std::vector<int32_t>> none;
    const auto it = topology.groups.find(kind);
    return it == topology.groups.end() ? none : it->second;
  };
  // Where `rank` sits in its group of `kind`: -1 when in none.
  const auto position = [&](const std::string& kind, int32_t rank) -> int64_t {
    for (const auto& g : groups_of(kind))
      if (const auto at = std::find(g.begin(), g.end(), rank); at != g.end()) return at - g.begin();
    return -1;
  };
  for (MimoModule& m : modules) {
    // Megatron's bridge asks for cp 1 on both sides too ("CP support will be added").
    if (const auto& cp = groups_of(m.name + "/cp"); !cp.empty() && cp.front().size() > 1)
      throw config::ConfigError("distributed.topology.options.modules",
                                "module " + m.name + " has cp " + std::to_string(cp.front().size()) +
                                    ": MIMO modules are trained with data, tensor, pipeline and expert "
                                    "parallelism so far (cp 1 in every module)");
    // A rank's stage is its place in its pp group (0 without one).
    const auto stage_of = [&](int32_t rank) {
      return groups_of(m.name + "/pp").empty() ? 0 : position(m.name + "/pp", rank);
    };
    const auto& pp_groups = groups_of(m.name + "/pp");
    m.stages = pp_groups.empty() ? 1 : static_cast<int64_t>(pp_groups.front().size());
    // The lanes are the dp groups' positions. Their leaders are Megatron's: the language model's
    // first tp rank at its first stage (which receives), an encoder's last at its last (which sends).
    const auto& tp_groups = groups_of(m.name + "/tp");
    const int64_t tp_size = tp_groups.empty() ? 1 : static_cast<int64_t>(tp_groups.front().size());
    const int64_t leader_position = m.encoder ? tp_size - 1 : 0;
    const int64_t bridge_stage = m.encoder ? m.stages - 1 : 0;
    for (const std::vector<int32_t>& lanes : groups_of(m.name + "/dp"))
      if (position(m.name + "/tp", lanes.front()) == leader_position &&
          stage_of(lanes.front()) == bridge_stage)
        m.lane_rank = lanes;
    if (m.lane_rank.empty())
      throw config::ConfigError("distributed.topology",
                                "the topology lays out no dp group of module " + m.name);
    m.stage_rank = {m.lane_rank.front()};
    for (const std::vector<int32_t>& stages : pp_groups)
      if (std::find(stages.begin(), stages.end(), m.lane_rank.front()) != stages.end()) m.stage_rank = stages;
    m.dp_size = static_cast<int64_t>(m.lane_rank.size());
    const int64_t lane = position(m.name + "/dp", runtime->rank());
    m.here = lane >= 0;
    m.dp_rank = m.here ? lane : 0;
    m.stage = m.here ? stage_of(runtime->rank()) : 0;
    m.dp = m.here && m.dp_size > 1 ? runtime->group(m.name + "/dp") : nullptr;
    const distributed::Communicator* tp = m.here ? runtime->group(m.name + "/tp") : nullptr;
    m.tp = tp != nullptr && tp->size() > 1 ? tp : nullptr;
    const distributed::Communicator* pp = m.here ? runtime->group(m.name + "/pp") : nullptr;
    m.pp = pp != nullptr && pp->size() > 1 ? pp : nullptr;
    const distributed::Communicator* ep = m.here ? runtime->group(m.name + "/ep") : nullptr;
    m.ep = ep != nullptr && ep->size() > 1 ? ep : nullptr;
    m.leader = m.tp == nullptr || m.tp->rank() == leader_position;
  }
  // Modules on the same ranks hand their rows over on each rank, microbatch by microbatch: one
  // stage each (Megatron's colocated bridge asks the same).
  const auto colocated =
      std::count_if(modules.begin(), modules.end(), [](const MimoModule& m) { return m.here; });
  for (const MimoModule& m : modules)
    if (colocated > 1 && m.stages > 1)
      throw config::ConfigError(
          "distributed.topology.options.modules",
          "module " + m.name + " has pp " + std::to_string(m.stages) +
              ", but it shares its ranks with another module (colocated): colocated "
              "modules run one pipeline stage each; give the modules ranks of their own "
              "(rank_offset) to pipeline them");
  return modules;
}

ModelOptions module_model_options(const std::vector<MimoModule>& modules, std::size_t m) {
  ModelOptions options;
  options.name_prefix = modules[m].name_prefix;
  options.head_name_prefix = modules[m].head_name_prefix;
  options.output_head = modules[m].encoder;
  if (!modules[m].encoder)
    for (const MimoModule& e : modules)
      if (e.encoder) options.splice_tokens.push_back(e.special_token);
  return options;
}

std::vector<MimoModuleModel> mimo_module_models(const boost::json::value& run_config) {
  const std::vector<MimoModule> modules = mimo_modules(run_config, nullptr);
  std::vector<MimoModuleModel> out;
  for (std::size_t m = 0; m < modules.size(); ++m)
    out.push_back({modules[m].name, modules[m].run_config, module_model_options(modules, m)});
  return out;
}

}  // namespace plexus

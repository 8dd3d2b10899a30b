// The topology_mimo plugin: one topology provider, "mimo", for heterogeneous multi-module models
// (Megatron-LM's MIMO): every module (modality encoders and the one "language" module) is a rank
// grid of its own, tp x cp x dp x pp from its rank offset, with an expert view expert_tp x ep x
// expert_dp x pp sharing its pipeline groups. Every group of every module is enumerated over the
// whole world as "<module>/<kind>"; the language module adds its embedding groups. The kinds and
// what they span are the plugin's public contract (README.md).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "modules.hpp"
#include "plexus/cpp/plugin.hpp"

namespace plexus::topology_mimo {
namespace {

using plexus::sdk::Error;

// A group kind of a module: its name after "<module>/" and the axes of its grid that it spans.
struct Kind {
  const char* name;
  bool expert;  // of the expert view, else of the dense grid
  std::vector<std::string_view> spans;
};

// Megatron's ProcessGroupCollection of a module (examples/mimo/training/topology.py), by the dims
// its HyperCommGrid is asked for (in comments); the names are the grid provider's for the same
// groups, so a layer asking its module for "tp" or "ep" gets what it gets from "grid".
const Kind kKinds[] = {
    {"tp", false, {"tp"}},                             // tp
    {"cp", false, {"cp"}},                             // cp
    {"dp", false, {"dp"}},                             // dp
    {"pp", false, {"pp"}},                             // pp
    {"dp_cp", false, {"dp", "cp"}},                    // dp_cp (= intra_dp_cp)
    {"tp_cp", false, {"tp", "cp"}},                    // tp_cp
    {"mp", false, {"tp", "pp"}},                       // mp (tp-pp)
    {"tp_dp", false, {"tp", "dp"}},                    // tp_dp
    {"tp_dp_cp", false, {"tp", "dp", "cp"}},           // tp_dp_cp
    {"tp_dp_cp_pp", false, {"tp", "dp", "cp", "pp"}},  // tp_cp_dp_pp: every rank of the module
    {"ep", true, {"ep"}},                              // ep
    {"expert_tp", true, {"tp"}},                       // expt_tp
    {"expert_dp", true, {"dp"}},                       // expt_dp (= intra_expt_dp)
    {"tp_ep", true, {"tp", "ep"}},                     // tp_ep
    {"tp_ep_pp", true, {"tp", "ep", "pp"}},            // tp_ep_pp
};

// The language module's embedding groups, per pipeline group: "embd" holds its first and last
// stage (the tied word embeddings' two copies; the first alone at pp 1) and "pos_embd" its first
// stage (learned positions), as Megatron's parallel_state and MIMO topology build them.
void add_embedding_groups(const ModuleGrids& module, plexus::sdk::GroupSink& sink) {
  for (const std::vector<int32_t>& stages : module.dense.groups({"pp"})) {
    std::vector<int32_t> ends{stages.front()};
    if (stages.size() > 1) ends.push_back(stages.back());
    sink.add((module.spec.name + "/embd").c_str(), ends);
    sink.add((module.spec.name + "/pos_embd").c_str(), std::vector<int32_t>{stages.front()});
  }
}

void build(const plx_topology_args& args, plexus::sdk::GroupSink& sink) {
  if (args.world_size < 1 || args.rank < 0 || args.rank >= args.world_size)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "rank " + std::to_string(args.rank) + " is outside a world of " +
                                              std::to_string(args.world_size) + " ranks");
  const plexus::sdk::Host host = plexus::sdk::Host::current();
  const plx_config modules = host.config_child(args.config, "modules");
  const std::vector<ModuleGrids> grids =
      plan_modules(host.config_json(modules), args.world_size, host.config_path(modules));
  for (const ModuleGrids& module : grids) {
    for (const Kind& kind : kKinds)
      for (const std::vector<int32_t>& group :
           (kind.expert ? module.expert : module.dense).groups(kind.spans))
        sink.add((module.spec.name + "/" + kind.name).c_str(), group);
    if (module.spec.name == kLanguage) add_embedding_groups(module, sink);
  }
}

constexpr const char* kSchema = R"json({
  "type": "object",
  "doc": "Megatron-LM's MIMO topology: each module (encoders and one 'language') a rank grid of its own; modules either all share the same ranks (colocated) or are pairwise disjoint, and together cover the world.",
  "properties": {
    "modules": {
      "type": "array",
      "doc": "the modules, each {name, num_ranks, tp, cp, pp, ep, expt_tp, rank_offset}; exactly one named 'language'",
      "items": {
        "type": "object",
        "additional_properties": false,
        "required": ["name", "num_ranks"],
        "properties": {
          "name": {"type": "string", "doc": "the module: 'language', or a modality such as 'images'"},
          "num_ranks": {"type": "integer", "minimum": 1, "doc": "ranks its grid spans"},
          "tp": {"type": "integer", "minimum": 1, "default": 1, "doc": "tensor parallel size"},
          "cp": {"type": "integer", "minimum": 1, "default": 1, "doc": "context parallel size"},
          "pp": {"type": "integer", "minimum": 1, "default": 1, "doc": "pipeline parallel size"},
          "ep": {"type": "integer", "minimum": 1, "default": 1, "doc": "expert parallel size (expert view)"},
          "expt_tp": {"type": "integer", "minimum": 1, "default": 1, "doc": "tensor parallel size of expert layers (1 unless set, as Megatron's MIMO)"},
          "rank_offset": {"type": "integer", "minimum": 0, "default": 0, "doc": "the grid's first world rank"}
        }
      }
    }
  },
  "required": ["modules"]
})json";

const plx_component_desc kMimo =
    plexus::sdk::topology_component<&build>("mimo",
                                            "Megatron-LM's MIMO: a rank grid per module (encoders and the "
                                            "language model), every group as <module>/<kind>",
                                            kSchema);

}  // namespace
}  // namespace plexus::topology_mimo

PLEXUS_PLUGIN("topology_mimo", "1.0.0",
              "The MIMO topology provider: heterogeneous modules on rank grids of their own",
              &plexus::topology_mimo::kMimo)

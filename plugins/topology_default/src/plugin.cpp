// The topology_default plugin: one topology provider, "grid", that factors the world the way
// Megatron-LM does (a dense tp x cp x dp x pp grid and an expert expert_tp x ep x expert_dp x pp
// grid in one shared order) and enumerates every group of every kind over the whole world. The
// kinds and what they span are the plugin's public contract (README.md).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "layout.hpp"
#include "plexus/cpp/plugin.hpp"
#include "plexus_rank_grid/rank_grid.hpp"

namespace plexus::topology_default {
namespace {

using plexus::sdk::Error;

// A group kind: its name for layers and the axes of its grid that it spans.
struct Kind {
  const char* name;
  bool expert;  // of the expert grid, else of the dense grid
  std::vector<std::string_view> spans;
};

// Megatron-LM's groups, by the tokens its RankGenerators are asked for (in comments).
const Kind kKinds[] = {
    {"tp", false, {"tp"}},                    // tensor model parallel
    {"cp", false, {"cp"}},                    // context parallel
    {"dp", false, {"dp"}},                    // data parallel
    {"pp", false, {"pp"}},                    // pipeline model parallel
    {"dp_cp", false, {"dp", "cp"}},           // data parallel with context parallel ('dp-cp')
    {"tp_cp", false, {"tp", "cp"}},           // tensor and context parallel ('tp-cp')
    {"mp", false, {"tp", "pp"}},              // model parallel ('tp-pp')
    {"tp_dp_cp", false, {"tp", "dp", "cp"}},  // tensor and data parallel with context parallel
    {"ep", true, {"ep"}},                     // expert model parallel
    {"expert_tp", true, {"tp"}},              // expert tensor parallel
    {"expert_dp", true, {"dp"}},              // expert data parallel
    {"tp_ep", true, {"tp", "ep"}},            // expert tensor and model parallel ('tp-ep')
};

void build(const plx_topology_args& args, plexus::sdk::GroupSink& sink) {
  if (args.world_size >= 1 && (args.rank < 0 || args.rank >= args.world_size))
    throw Error(PLX_ERR_INVALID_ARGUMENT, "rank " + std::to_string(args.rank) + " is outside a world of " +
                                              std::to_string(args.world_size) + " ranks");
  const plexus::sdk::Host host = plexus::sdk::Host::current();
  const Layout layout =
      plan_layout(read_options(args.config), args.world_size, host.config_path(args.config));
  for (const Kind& kind : kKinds)
    for (const std::vector<int32_t>& group : (kind.expert ? layout.expert : layout.dense).groups(kind.spans))
      sink.add(kind.name, group);
}

constexpr const char* kSchema = R"json({
  "type": "object",
  "doc": "Megatron-LM's process grid: tp x cp x dp x pp for dense layers, expert_tp x ep x expert_dp x pp for expert layers; dp and expert_dp are what the world size leaves.",
  "properties": {
    "tp": {"type": "integer", "minimum": 1, "default": 1, "doc": "tensor parallel size"},
    "cp": {"type": "integer", "minimum": 1, "default": 1, "doc": "context parallel size"},
    "ep": {"type": "integer", "minimum": 1, "default": 1, "doc": "expert parallel size (expert grid)"},
    "pp": {"type": "integer", "minimum": 1, "default": 1, "doc": "pipeline parallel size"},
    "expert_tp": {"type": "integer", "minimum": 1, "doc": "tensor parallel size of expert layers (default: tp)"},
    "order": {"type": "string", "default": "tp-cp-ep-dp-pp",
              "doc": "the grid's axes, fastest-varying (closest ranks) first; a name of size 1 may be left out"}
  }
})json";

const plx_component_desc kGrid = plexus::sdk::topology_component<&build>(
    "grid", "Megatron-LM's tp/cp/dp/pp grid and expert ep grid, every group over the world", kSchema);

}  // namespace
}  // namespace plexus::topology_default

PLEXUS_PLUGIN("topology_default", "1.0.0", "The default topology provider: Megatron-LM's parallel grid",
              &plexus::topology_default::kGrid)

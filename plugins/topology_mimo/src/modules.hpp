// The mimo provider's options: the modules of a heterogeneous model, each a rank grid of its own
// (Megatron-LM's ModuleGridSpec), and the checks Megatron's MIMO topology makes of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plexus_rank_grid/rank_grid.hpp"

namespace plexus::topology_mimo {

// The module every MIMO model has exactly one of: the language model.
inline constexpr const char* kLanguage = "language";

// One entry of options.modules, as written (defaults filled in), and its derived sizes.
struct ModuleSpec {
  std::string name;
  int64_t num_ranks = 0;
  int64_t tp = 1, cp = 1, pp = 1, ep = 1, expt_tp = 1;
  int64_t rank_offset = 0;
  int64_t dp = 0;       // num_ranks / (tp * cp * pp)
  int64_t expt_dp = 0;  // num_ranks / (expt_tp * ep * pp)
  std::string path;     // "distributed.topology.options.modules[1] (language)", for messages

  int64_t end() const { return rank_offset + num_ranks; }
};

// A module's two factorizations of its ranks, both with pp outermost so they share the pipeline
// groups (Megatron's expert view shares pp): the dense grid tp x cp x dp x pp (tp fastest) and the
// expert grid expert_tp x ep x expert_dp x pp.
struct ModuleGrids {
  ModuleSpec spec;
  rank_grid::RankGrid dense;
  rank_grid::RankGrid expert;
};

// Reads options.modules (`modules_json` is its JSON text; `where` its config path) and checks
// them against the world size: a non-empty list, names that are unique and usable in a group kind,
// exactly one "language", sizes that divide each module's ranks, spans inside the world, spans
// that are all equal (colocated) or pairwise disjoint, and that together cover every rank. Every
// refusal is a plexus::sdk::Error (PLX_ERR_INVALID_ARGUMENT) starting with the path of the option at
// fault and naming the modules and their spans.
std::vector<ModuleGrids> plan_modules(const std::string& modules_json, int32_t world_size,
                                      const std::string& where);

// "images [0, 4), language [4, 8)": the modules' spans of world ranks.
std::string spans_text(const std::vector<ModuleSpec>& modules);

}  // namespace plexus::topology_mimo

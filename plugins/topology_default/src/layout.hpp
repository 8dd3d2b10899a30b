// The grid component's options and the two rank grids they describe.
//
// The dense grid factors the world into tp x cp x dp x pp (ep is 1 there); the expert grid, used
// by mixture-of-experts layers, into expert_tp x ep x expert_dp x pp (cp is 1 there). Both lay
// their axes out in the same `order`, as Megatron-LM's two RankGenerators do, and both must give
// the same pipeline groups.
#pragma once

#include <cstdint>
#include <string>

#include "plexus/host.h"
#include "plexus_rank_grid/rank_grid.hpp"

namespace plexus::topology_default {

using rank_grid::Axis;
using rank_grid::RankGrid;

struct GridOptions {
  int64_t tp = 1;
  int64_t cp = 1;
  int64_t ep = 1;
  int64_t pp = 1;
  int64_t expert_tp = 1;  // the config's default is tp
  std::string order = "tp-cp-ep-dp-pp";
};

// Reads the options from the component's validated config node (defaults filled in).
GridOptions read_options(plx_config config);

struct Layout {
  RankGrid dense;
  RankGrid expert;
};

// Checks the options against the world size and builds both grids. Every refusal is a
// plexus::sdk::Error (PLX_ERR_INVALID_ARGUMENT) whose message starts with the config path of
// the option at fault (`where` is the path of the options node) and names the numbers that do
// not fit.
Layout plan_layout(const GridOptions& options, int32_t world_size, const std::string& where);

}  // namespace plexus::topology_default

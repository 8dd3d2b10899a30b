// What a scheduler that overlaps two microbatches needs from the engine's plx_schedule_env
// besides the slot planner (overlap_plan.hpp): the kind of every stage, one microbatch's forward
// or backward over a range of units as a chain of nodes, the split of weight gradients, and
// running one planned node on its stream. Failures of the env's callbacks throw
// plexus::sdk::Error (the host has set the message), which the SDK's guard reports.
#pragma once

#include <cstdint>
#include <vector>

#include "plexus/scheduler.h"
#include "plexus_schedule_overlap/overlap_plan.hpp"

namespace plexus::schedule_overlap {

// Per unit, per stage: whether it is a communication stage (PLX_STAGE_COMM).
using StageKinds = std::vector<std::vector<bool>>;

StageKinds stage_kinds(const plx_schedule_env& env);

// Microbatch `mb` through units [first, first + count): forward in order, each unit's stages in
// order; backward in reverse, each unit's stages in reverse.
std::vector<Node> forward_chain(uint32_t mb, const StageKinds& kinds, uint32_t first, uint32_t count);
std::vector<Node> backward_chain(uint32_t mb, const StageKinds& kinds, uint32_t first, uint32_t count);

// Declares that the scheduler will call backward_weights (ABI 1.5), when the host offers it;
// false from a host before 1.5 (no such field) or one that leaves it NULL: backward then
// computes the weight gradients itself. Must run before the step's first backward call.
bool ask_for_split_weights(const plx_schedule_env& env);

// Runs one node: a communication stage on the comm stream, a compute stage or weight gradients on
// the compute stream.
void run_node(const plx_schedule_env& env, const Node& node);

}  // namespace plexus::schedule_overlap

// The order in which two chains of stages run so that the communication of one hides under
// the computation of the other: a forward chain (one microbatch's units in order, each unit's
// stages in order) and a backward chain (another microbatch's units in reverse, each unit's
// stages in reverse). Either chain may be empty.
//
// Shared by the schedulers that overlap two microbatches (plugins/combined_1f1b without
// pipelining, plugins/pipeline_schedules' interleaved 1F1B with the EP overlap): both must order
// a pair the same way, so the planner lives here once.
#pragma once

#include <cstdint>
#include <vector>

namespace plexus::schedule_overlap {

enum class Pass { forward, backward, weights };

struct Node {
  Pass pass = Pass::forward;
  uint32_t microbatch = 0;
  uint32_t unit = 0;
  uint32_t stage = 0;  // unused for weights
  bool comm = false;   // a communication stage: issued on the comm stream, it only starts its transfer
};

// Orders the two chains in slots, as a two-stream list schedule with unit-length stages:
// within a slot every chain whose next stage is communication issues it (backward first), then
// one compute stage runs: the next stage of a chain that did not issue in this slot (the chain
// with more stages left; ties to backward), or else, when no compute stage is ready, the oldest
// delayed weight gradient. A stage never shares a slot with its chain's previous stage, so each
// communication stage is in flight while the other chain computes, and waited for by its own
// chain's next compute stage one slot later.
//
// A backward unit's weight gradients (when `split_weights`) become due once its last backward
// stage has run; they fill slots with nothing else to compute, and any still due at the end run
// then, oldest first, so they all complete inside the returned sequence.
std::vector<Node> interleave(const std::vector<Node>& forward, const std::vector<Node>& backward,
                             bool split_weights);

}  // namespace plexus::schedule_overlap

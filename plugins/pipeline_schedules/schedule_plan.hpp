// The pipeline schedules as plain data: the ordered operations one pipeline rank performs in a
// step (receive, forward, send, backward of a microbatch through one of its chunks), computed
// from the pipeline's shape alone. No engine, no SDK: the plugin walks the list calling the
// engine's plx_schedule_env, and the tests check the lists (and simulate all ranks together)
// without one.
//
// The facts are Megatron-LM's (megatron/core/pipeline_parallel/schedules.py): the non-interleaved
// 1F1B, the interleaved 1F1B over virtual stages with its schedule table, their warmup / steady /
// cooldown counts, the refusals, and the combined 1F1B pairing of the EP overlap.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace plexus::pipeline_schedules {

enum class OpKind : uint8_t { recv_forward, forward, send_forward, recv_backward, backward, send_backward };

const char* to_string(OpKind kind) noexcept;

// One operation of a rank on microbatch `microbatch` through its chunk `chunk` (0 .. V-1, the
// rank's virtual stages; model chunk chunk * P + rank). `combined` marks a forward and the
// backward right after it that run merged stage by stage (the EP overlap's pair); their sends
// follow the pair.
struct Op {
  OpKind kind = OpKind::forward;
  uint32_t microbatch = 0;
  uint32_t chunk = 0;
  bool combined = false;
  friend bool operator==(const Op&, const Op&) = default;
};

std::string to_string(const Op& op);
std::ostream& operator<<(std::ostream& os, const Op& op);

// Raised for a shape a schedule refuses; the message names the numbers and what to change.
class ScheduleError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Which of the two schedules a component asked for.
enum class Schedule { one_f_one_b, interleaved };

// A step's shape as a rank sees it.
struct Shape {
  uint32_t pipeline_size = 1;  // P
  uint32_t pipeline_rank = 0;  // r
  uint32_t microbatches = 1;   // M
  uint32_t num_chunks = 1;     // V, the rank's virtual stages
  // N, microbatch_group_size_per_vp_stage; unset: P (Megatron's default).
  std::optional<uint32_t> group_size;
  // overlap_moe_expert_parallel_comm: Megatron's combined 1F1B.
  bool overlap = false;
};

// Megatron's counts of (virtual) microbatches on one rank. Forward and backward passes each
// number `total`: `warmup` forwards alone, `steady` forward-backward pairs, `cooldown`
// (= warmup) backwards alone.
struct Counts {
  uint32_t total = 0;
  uint32_t warmup = 0;
  uint32_t steady = 0;
  uint32_t cooldown = 0;
  bool all_in_warmup = false;  // the uncapped warmup reached total (Megatron's flag)
  friend bool operator==(const Counts&, const Counts&) = default;
};

// Non-interleaved 1F1B on rank r of P with M microbatches: warmup = min(P - r - 1, M).
Counts one_f_one_b_counts(uint32_t P, uint32_t r, uint32_t M);
// Interleaved 1F1B: total = M V, warmup = (P - r - 1) * 2 + (V - 1) * N (+1 with the overlap),
// capped at total.
Counts interleaved_counts(uint32_t P, uint32_t r, uint32_t M, uint32_t V, uint32_t N, bool overlap);

// One entry of the schedule table: forward virtual microbatch k runs `microbatch` through chunk
// `chunk`; backward virtual microbatch k runs the same microbatch through chunk V - 1 - chunk.
struct VirtualMicrobatch {
  uint32_t microbatch = 0;
  uint32_t chunk = 0;
  friend bool operator==(const VirtualMicrobatch&, const VirtualMicrobatch&) = default;
};
std::ostream& operator<<(std::ostream& os, const VirtualMicrobatch& v);

// Megatron's schedule table: microbatches in groups of N (the last group takes the remainder);
// for each group, for chunk 0 .. V-1, for each microbatch of the group, (microbatch, chunk).
std::vector<VirtualMicrobatch> schedule_table(uint32_t M, uint32_t V, uint32_t N);

// Megatron's refusals of the interleaved schedule: N outside [P, M]; a last group of fewer than
// P microbatches (M % N neither 0 nor >= P: dependency bubbles).
void check_interleaved(uint32_t P, uint32_t M, uint32_t N);

// Whether model chunk chunk * P + r is the model's first (holds the embedding: nothing to
// receive forward, nothing to send backward) or last (holds the head: nothing to send forward,
// nothing to receive backward).
bool holds_embedding(uint32_t P, uint32_t r, uint32_t chunk);
bool holds_head(uint32_t P, uint32_t r, uint32_t V, uint32_t chunk);

// The non-interleaved 1F1B of rank r (one chunk): warmup forwards, then forward(i + warmup)
// and backward(i) (the oldest in flight), then the cooldown backwards. At P = 1 it is gradient
// accumulation: forward(i), backward(i). With `overlap` (only at P = 1: Megatron's no-pipelining
// combined 1F1B) forward(i) runs merged with backward(i - 1).
std::vector<Op> one_f_one_b(uint32_t P, uint32_t r, uint32_t M, bool overlap = false);

// The interleaved 1F1B of rank r over its V chunks with groups of N microbatches, as Megatron
// orders it for any V >= 1 and N >= 1 (not validated here: see check_interleaved and plan).
// With `overlap` each steady pair (forward of virtual microbatch k + warmup, backward of k) is
// combined.
std::vector<Op> interleaved(uint32_t P, uint32_t r, uint32_t M, uint32_t V, uint32_t N, bool overlap);

// What a component runs for a shape, dispatched as Megatron's get_forward_backward_func does
// (one virtual stage is no virtual pipeline): `interleaved` with V > 1 and P > 1 runs the
// interleaved schedule; with V = 1 the non-interleaved one (at P = 1 gradient accumulation, or
// the combined 1F1B with the overlap). Refusals (ScheduleError, naming the component):
//  - `one_f_one_b` with V > 1 (use interleaved_1f1b);
//  - V > 1 with P = 1 (Megatron: "pipeline-model-parallel size should be greater than 1 with
//    interleaved schedule");
//  - the overlap with P > 1 and V = 1 (Megatron: PP > 1 with the overlap requires VPP; the
//    non-interleaved schedule has no combined branch);
//  - with V > 1 and P > 1, check_interleaved's.
std::vector<Op> plan(Schedule schedule, const Shape& shape);

// The component's name, for messages.
const char* component_name(Schedule schedule) noexcept;

}  // namespace plexus::pipeline_schedules

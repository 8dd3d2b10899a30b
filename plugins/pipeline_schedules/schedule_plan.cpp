#include "schedule_plan.hpp"

#include <algorithm>
#include <cstddef>
#include <ostream>

namespace plexus::pipeline_schedules {
namespace {

// One computation step of a rank: a forward, a backward, or (the EP overlap) both merged.
struct Step {
  std::optional<VirtualMicrobatch> forward;
  std::optional<VirtualMicrobatch> backward;
};

// Lays out a rank's steps as Megatron's loop does: `warmup` forwards alone; then, for
// k = 0 .. total - warmup - 1, forward(k + warmup) and backward(k), merged into one step with
// the overlap; then the remaining backwards alone. forwards[k] / backwards[k] are the k-th
// forward and backward virtual microbatches.
std::vector<Step> steps(const std::vector<VirtualMicrobatch>& forwards,
                        const std::vector<VirtualMicrobatch>& backwards, uint32_t warmup, bool overlap) {
  const auto total = static_cast<uint32_t>(forwards.size());
  std::vector<Step> out;
  for (uint32_t k = 0; k < warmup; ++k) out.push_back({forwards[k], std::nullopt});
  for (uint32_t k = 0; k + warmup < total; ++k) {
    if (overlap) {
      out.push_back({forwards[k + warmup], backwards[k]});
    } else {
      out.push_back({forwards[k + warmup], std::nullopt});
      out.push_back({std::nullopt, backwards[k]});
    }
  }
  for (uint32_t k = total - warmup; k < total; ++k) out.push_back({std::nullopt, backwards[k]});
  return out;
}

// Turns steps into operations with the point-to-point transfers around them. A step's receives
// are posted one step ahead, before the previous step's computation, so the transfer travels
// under that computation (what Megatron's overlap_p2p_comm does with its async handles); the
// engine waits for a received tensor only when the first (forward) or last (backward) unit of
// the chunk needs it. Sends follow the step's computation at once. The chunk holding the
// embedding receives no input and sends no input gradient; the one holding the head sends no
// output and receives no output gradient (the env refuses a transfer without a peer).
std::vector<Op> with_transfers(const std::vector<Step>& plan, uint32_t P, uint32_t r, uint32_t V) {
  auto receives = [&](const Step& step, std::vector<Op>& out) {
    if (step.forward && !holds_embedding(P, r, step.forward->chunk))
      out.push_back({OpKind::recv_forward, step.forward->microbatch, step.forward->chunk});
    if (step.backward && !holds_head(P, r, V, step.backward->chunk))
      out.push_back({OpKind::recv_backward, step.backward->microbatch, step.backward->chunk});
  };
  std::vector<Op> out;
  if (!plan.empty()) receives(plan.front(), out);
  for (std::size_t s = 0; s < plan.size(); ++s) {
    const Step& step = plan[s];
    if (s + 1 < plan.size()) receives(plan[s + 1], out);
    const bool combined = step.forward && step.backward;
    if (step.forward)
      out.push_back({OpKind::forward, step.forward->microbatch, step.forward->chunk, combined});
    if (step.backward)
      out.push_back({OpKind::backward, step.backward->microbatch, step.backward->chunk, combined});
    if (step.forward && !holds_head(P, r, V, step.forward->chunk))
      out.push_back({OpKind::send_forward, step.forward->microbatch, step.forward->chunk});
    if (step.backward && !holds_embedding(P, r, step.backward->chunk))
      out.push_back({OpKind::send_backward, step.backward->microbatch, step.backward->chunk});
  }
  return out;
}

Counts counts_from(uint32_t total, uint32_t uncapped_warmup) {
  Counts c;
  c.total = total;
  c.all_in_warmup = uncapped_warmup >= total;
  c.warmup = std::min(uncapped_warmup, total);
  c.steady = total - c.warmup;
  c.cooldown = c.warmup;
  return c;
}

std::string prefixed(Schedule schedule, const std::string& text) {
  return std::string("scheduler \"") + component_name(schedule) + "\": " + text;
}

}  // namespace

const char* to_string(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::recv_forward:
      return "recv_forward";
    case OpKind::forward:
      return "forward";
    case OpKind::send_forward:
      return "send_forward";
    case OpKind::recv_backward:
      return "recv_backward";
    case OpKind::backward:
      return "backward";
    case OpKind::send_backward:
      return "send_backward";
  }
  return "?";
}

std::string to_string(const Op& op) {
  return std::string(to_string(op.kind)) + "(mb " + std::to_string(op.microbatch) + ", chunk " +
         std::to_string(op.chunk) + (op.combined ? ", combined)" : ")");
}

std::ostream& operator<<(std::ostream& os, const Op& op) {
  return os << to_string(op);
}

std::ostream& operator<<(std::ostream& os, const VirtualMicrobatch& v) {
  return os << "(mb " << v.microbatch << ", chunk " << v.chunk << ")";
}

const char* component_name(Schedule schedule) noexcept {
  return schedule == Schedule::one_f_one_b ? "1f1b" : "interleaved_1f1b";
}

Counts one_f_one_b_counts(uint32_t P, uint32_t r, uint32_t M) {
  return counts_from(M, P - r - 1);
}

Counts interleaved_counts(uint32_t P, uint32_t r, uint32_t M, uint32_t V, uint32_t N, bool overlap) {
  // The x2: the last rank starts its first backward only after every earlier rank has admitted
  // enough forwards for the steady state to find work on every rank (Megatron issues #169, #675).
  // The +1 with the overlap makes every steady pair's forward and backward independent.
  const uint32_t warmup = (P - r - 1) * 2 + (V - 1) * N + (overlap ? 1 : 0);
  return counts_from(M * V, warmup);
}

std::vector<VirtualMicrobatch> schedule_table(uint32_t M, uint32_t V, uint32_t N) {
  if (N == 0) throw ScheduleError("the schedule table needs a microbatch group size of at least 1");
  std::vector<VirtualMicrobatch> table;
  table.reserve(static_cast<std::size_t>(M) * V);
  for (uint32_t first = 0; first < M; first += N) {
    // The last group runs to M: it takes the remainder (whole when N divides M).
    const uint32_t end = first + N >= M ? M : first + N;
    for (uint32_t chunk = 0; chunk < V; ++chunk)
      for (uint32_t mb = first; mb < end; ++mb) table.push_back({mb, chunk});
    if (end == M) break;
  }
  return table;
}

void check_interleaved(uint32_t P, uint32_t M, uint32_t N) {
  if (N < P || N > M) {
    std::string why;
    if (M < P)
      why =
          "the interleaved schedule needs at least as many microbatches as pipeline stages "
          "(train.microbatches " +
          std::to_string(M) + " < pp " + std::to_string(P) + ")";
    else if (N > M)
      why = "lower microbatch_group_size_per_vp_stage to at most train.microbatches";
    else
      why = "raise microbatch_group_size_per_vp_stage to at least the pipeline size";
    throw ScheduleError(
        "The number of contiguous micro-batches in a virtual pipeline stage should range in [PP=" +
        std::to_string(P) + ", M=" + std::to_string(M) + "], but microbatch_group_size_per_vp_stage is " +
        std::to_string(N) + ": " + why);
  }
  const uint32_t remainder = M % N;
  if (remainder > 0 && remainder < P)
    throw ScheduleError(
        "The remainder of M (the total micro-batches, " + std::to_string(M) +
        ") divided by N (number of contiguous micro-batches in a virtual pipeline stage, " +
        std::to_string(N) + ") should be 0, or larger than or equal to the pipeline-parallel size (PP=" +
        std::to_string(P) + "), but it is " + std::to_string(remainder) +
        ". Otherwise, it introduces dependency bubbles in the pipeline and reduces throughput (choose "
        "train.microbatches as a multiple of microbatch_group_size_per_vp_stage)");
}

bool holds_embedding(uint32_t P, uint32_t r, uint32_t chunk) {
  return chunk * P + r == 0;
}

bool holds_head(uint32_t P, uint32_t r, uint32_t V, uint32_t chunk) {
  return chunk * P + r == V * P - 1;
}

std::vector<Op> one_f_one_b(uint32_t P, uint32_t r, uint32_t M, bool overlap) {
  if (overlap && P > 1)
    throw ScheduleError(
        "the non-interleaved 1F1B has no combined forward-backward step at pipeline_size > 1 (Megatron: PP > "
        "1 "
        "with overlap_moe_expert_parallel_comm requires virtual stages)");
  // At P = 1 with the overlap this is Megatron's no-pipelining combined 1F1B, which the
  // interleaved counts give: one forward alone (warmup 1), then pairs.
  if (overlap) return interleaved(1, 0, M, 1, 1, true);
  std::vector<VirtualMicrobatch> order(M);
  for (uint32_t mb = 0; mb < M; ++mb) order[mb] = {mb, 0};
  // Backward takes the oldest microbatch in flight (FIFO): the same order as forward.
  return with_transfers(steps(order, order, one_f_one_b_counts(P, r, M).warmup, false), P, r, 1);
}

std::vector<Op> interleaved(uint32_t P, uint32_t r, uint32_t M, uint32_t V, uint32_t N, bool overlap) {
  const std::vector<VirtualMicrobatch> forwards = schedule_table(M, V, N);
  std::vector<VirtualMicrobatch> backwards = forwards;
  for (VirtualMicrobatch& b : backwards) b.chunk = V - 1 - b.chunk;
  return with_transfers(
      steps(forwards, backwards, interleaved_counts(P, r, M, V, N, overlap).warmup, overlap), P, r, V);
}

std::vector<Op> plan(Schedule schedule, const Shape& shape) {
  const uint32_t P = shape.pipeline_size, r = shape.pipeline_rank, M = shape.microbatches,
                 V = shape.num_chunks;
  if (P == 0 || r >= P || V == 0)
    throw ScheduleError(prefixed(schedule, "the engine reports pipeline rank " + std::to_string(r) + " of " +
                                               std::to_string(P) + " holding " + std::to_string(V) +
                                               " chunks, which is no pipeline"));
  if (schedule == Schedule::one_f_one_b && V > 1)
    throw ScheduleError(
        prefixed(schedule,
                 "runs one chunk per pipeline rank, but pipeline rank " + std::to_string(r) + " holds " +
                     std::to_string(V) +
                     " chunks (virtual stages, distributed.pipeline.virtual_stages); use scheduler.component "
                     "\"interleaved_1f1b\""));
  if (V > 1 && P == 1)
    throw ScheduleError(prefixed(
        schedule,
        "pipeline-model-parallel size should be greater than 1 with interleaved schedule: this rank holds " +
            std::to_string(V) +
            " chunks (virtual stages) but pp is 1; set distributed.pipeline.virtual_stages to 1 (or 0) "
            "without pipeline parallelism"));
  if (V == 1) {
    if (shape.overlap && P > 1)
      throw ScheduleError(prefixed(
          schedule,
          "overlap_moe_expert_parallel_comm with pipeline parallelism (pp " + std::to_string(P) +
              ") needs the interleaved schedule over virtual stages, as in Megatron (PP > 1 with the "
              "overlap requires VPP; its non-interleaved 1F1B has no combined forward-backward step): "
              "use scheduler.component \"interleaved_1f1b\" with distributed.pipeline.virtual_stages >= "
              "2, or turn the option off"));
    return one_f_one_b(P, r, M, shape.overlap);
  }
  const uint32_t N = shape.group_size.value_or(P);
  try {
    check_interleaved(P, M, N);
  } catch (const ScheduleError& e) {
    throw ScheduleError(prefixed(schedule, e.what()));
  }
  return interleaved(P, r, M, V, N, shape.overlap);
}

}  // namespace plexus::pipeline_schedules

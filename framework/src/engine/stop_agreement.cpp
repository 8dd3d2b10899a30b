#include "engine/stop_agreement.hpp"

#include "plexus/core/distributed/runtime.hpp"

namespace plexus {

std::optional<Interruption> agree_on_stop(const TrainerEvents& events, const distributed::Runtime* runtime,
                                          int64_t steps_done) {
  if (!events.stop_signal) return std::nullopt;
  const bool alone = runtime == nullptr || runtime->world_size() == 1;
  const auto over_job = [&](double value, distributed::ReduceOp op) {
    return alone ? value : runtime->world().all_reduce(value, op);
  };
  const int mine = events.stop_signal();
  // One scalar all-reduce per poll: a signal may reach one rank only (a user signalling one
  // process), or the ranks during different steps, yet all must stop after the same one.
  const auto agreed = static_cast<int>(over_job(mine, distributed::ReduceOp::max));
  if (agreed == 0) return std::nullopt;
  // Rare, so a second collective: the first rank that saw it, for the message.
  const int32_t world_rank = runtime != nullptr ? runtime->rank() : 0;
  const int32_t world_size = runtime != nullptr ? runtime->world_size() : 1;
  const auto rank = static_cast<int32_t>(
      over_job(static_cast<double>(mine != 0 ? world_rank : world_size), distributed::ReduceOp::min));
  return Interruption{agreed, rank, steps_done};
}

}  // namespace plexus

// The ranks' agreement on a stop request (TrainerEvents::stop_signal: SIGTERM or SIGINT for
// plexus-train), shared by the trainers: every rank polls its own and they agree by a collective at
// a step boundary, so that they all stop after the same step.
#pragma once

#include <cstdint>
#include <optional>

#include "plexus/core/engine/trainer.hpp"

namespace plexus {

namespace distributed {
class Runtime;
}

// Collective over the world (`runtime`; nullptr: one process): the agreed stop after `steps_done`
// steps, or nothing when no rank was asked to stop. Its rank is the lowest that was.
std::optional<Interruption> agree_on_stop(const TrainerEvents& events, const distributed::Runtime* runtime,
                                          int64_t steps_done);

}  // namespace plexus

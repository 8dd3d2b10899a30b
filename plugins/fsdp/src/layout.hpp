// Where a unit's elements live under each strategy: the padded length of its whole buffers and
// this rank's shard of them.
#pragma once

#include <cstdint>

#include "options.hpp"
#include "plexus/data_parallel.h"

namespace fsdp {

// Shards are whole multiples of this many elements (64 bytes of float32), so every rank's
// shard starts aligned for vector loads and the collectives' chunks are equal.
constexpr int64_t kShardAlignment = 16;

// The layout of `numel` elements over a group of `size` ranks, as seen by `rank`. no_shard keeps
// the unit whole (padded_numel == numel, the shard is everything); the sharded strategies pad to
// a multiple of size x kShardAlignment and give rank r the r-th of `size` equal slices.
plx_dp_layout plan_layout(Strategy mode, int64_t numel, int32_t rank, int32_t size) noexcept;

}  // namespace fsdp

// Reductions whose result does not depend on the thread count: the work is cut into a number of
// parts fixed by its size alone, each part sums its own contiguous range into a partial, and the
// partials are added in part order. Any number of threads (1 when the machine is busy, all its
// cores when idle) then gives the same bits, so a run's results do not depend on OMP_NUM_THREADS
// or on how many cores it was given.
#pragma once

#include <algorithm>
#include <cstdint>

namespace plexus::kernels {

// At most this many parts: enough to keep 16 threads busy, few enough that adding the partials
// costs nothing next to the work.
constexpr int kReductionParts = 16;

// The parts of a reduction over `count` items (rows, blocks) when it runs in parallel, else 1.
inline int reduction_parts(int64_t count, bool parallel) {
  return parallel ? static_cast<int>(std::clamp<int64_t>(count, 1, kReductionParts)) : 1;
}

struct PartRange {
  int64_t begin = 0, end = 0;
};

// Part `part` of `parts` over [0, count): contiguous, lengths differing by at most one.
inline PartRange part_range(int64_t count, int part, int parts) {
  const int64_t base = count / parts, extra = count % parts;
  const int64_t begin = base * part + std::min<int64_t>(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

}  // namespace plexus::kernels

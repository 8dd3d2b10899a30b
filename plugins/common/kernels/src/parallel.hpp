// Internal: when a loop is worth an OpenMP parallel region.
#pragma once

#include <cstdint>

namespace plexus::kernels::detail {

// Elementwise work below this many elements runs on the calling thread: waking the team costs
// more than it saves.
constexpr int64_t kParallelElements = int64_t{1} << 14;

inline bool worth_parallel(int64_t elements) {
  return elements >= kParallelElements;
}

}  // namespace plexus::kernels::detail

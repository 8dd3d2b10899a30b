// When mamba.mixer's loops start an OpenMP region, and per-thread scratch for them, allocated
// before the region starts (nothing may throw inside one).
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plexus_kernels/buffer.hpp"

namespace plexus::mamba::detail {

// Work below this many elements (or multiply-adds) runs on the calling thread: waking the team
// costs a few microseconds, and on a busy machine a parked thread may wait for a scheduler tick.
constexpr int64_t kParallelWork = int64_t{1} << 15;

inline bool worth_parallel(int64_t work) {
  return work >= kParallelWork;
}

template <class T>
class PerThread {
 public:
  explicit PerThread(std::size_t elements) : buffers_(static_cast<std::size_t>(omp_get_max_threads())) {
    for (auto& b : buffers_) b.get<T>(elements);
  }
  // The calling thread's scratch (inside a parallel region started after construction).
  T* mine() { return buffers_[static_cast<std::size_t>(omp_get_thread_num())].template data<T>(); }

 private:
  std::vector<plexus::kernels::Buffer> buffers_;
};

}  // namespace plexus::mamba::detail

// For the layer's .cu files: launch sizes, a block reduction whose order depends only on the
// block size, and the launch check. No warp shuffles, no atomics.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "plexus_cuda_kernels/error.hpp"

namespace plexus::moe::cuda {

// Threads of the block-per-row (or per-column) reductions and of the elementwise kernels.
constexpr int kReduceThreads = 128;
constexpr int kThreads = 256;

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Blocks of kThreads for a grid-stride loop over n elements (capped: the loop covers the rest).
inline unsigned blocks_for(int64_t n) {
  constexpr int64_t kMaxBlocks = 65535;
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// The sum of one value per thread over a block of exactly kReduceThreads threads, as a tree in
// shared memory (the order of the additions depends on the block size alone); every thread gets
// it, and every thread of the block must call it.
template <class V>
__device__ V block_sum(V value) {
  __shared__ V partial[kReduceThreads];
  const unsigned t = threadIdx.x;
  partial[t] = value;
  __syncthreads();
  for (unsigned half = kReduceThreads / 2; half > 0; half /= 2) {
    if (t < half) partial[t] += partial[t + half];
    __syncthreads();
  }
  const V sum = partial[0];
  __syncthreads();
  return sum;
}

inline void check_launch(const char* kernel) {
  PLEXUS_CUDA_CHECK(cudaGetLastError(), kernel);
}

}  // namespace plexus::moe::cuda

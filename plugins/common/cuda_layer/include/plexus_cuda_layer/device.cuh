// For the .cu files of layer plugins (nvcc only; a plugin's .cpp files must not include it):
// launch sizes of a grid-stride loop, a block reduction whose order depends only on the block
// size, and the launch check. Written to be read against the CPU code: no warp shuffles, no
// atomics, so every sum has a fixed order and a result is the same on every run.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "plexus_cuda_kernels/error.hpp"

namespace plexus::cuda_layer {

// Threads of the elementwise (grid-stride) kernels.
constexpr int kThreads = 256;

// Global index and stride of a grid-stride loop, in int64.
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

// The sum of one value per thread over a block of exactly kBlock threads (a power of 2), as a
// tree in shared memory: the order of the additions depends on kBlock alone. Every thread gets
// the sum. Every thread of the block must call it.
template <int kBlock, class V>
__device__ V block_sum(V value) {
  static_assert(kBlock >= 1 && kBlock <= 1024 && (kBlock & (kBlock - 1)) == 0,
                "block_sum needs a power-of-2 block of at most 1024 threads");
  __shared__ V partial[kBlock];
  const unsigned t = threadIdx.x;
  partial[t] = value;
  __syncthreads();
  for (unsigned half = kBlock / 2; half > 0; half /= 2) {
    if (t < half) partial[t] += partial[t + half];
    __syncthreads();
  }
  const V sum = partial[0];
  __syncthreads();  // the next call may overwrite partial[]
  return sum;
}

// Right after a launch: a bad configuration (or an earlier asynchronous failure) as a CudaError
// naming the kernel.
inline void check_launch(const char* kernel) {
  PLEXUS_CUDA_CHECK(cudaGetLastError(), kernel);
}

}  // namespace plexus::cuda_layer

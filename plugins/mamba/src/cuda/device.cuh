// For the layer's .cu files: the scalar functions of the CPU path (math.hpp) on the device, a
// block reduction whose order depends only on the block size, launch sizes and the launch check.
// Written to be read against the CPU code: no warp shuffles, no atomics.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "plexus_cuda_kernels/error.hpp"

namespace plexus::mamba::cuda {

// ---- scalar math (math.hpp's, in float) ----

// exp with its argument clamped to [-87, 88], so it never overflows (1 / (1 + exp(-v)) stays a
// number for any finite v) and never flushes a sum's tail to a subnormal; comparisons, not
// fminf/fmaxf, so NaN stays NaN.
__device__ __forceinline__ float exp_clamped(float v) {
  v = v > 88.0f ? 88.0f : v;
  v = v < -87.0f ? -87.0f : v;
  return expf(v);
}

__device__ __forceinline__ float sigmoid(float v) {
  return 1.0f / (1.0f + exp_clamped(-v));
}

// exp of a float64 argument rounded to float first: the chunk decays, exp(cs_l - cs_s), whose
// cumulative sums are float64 (as on the CPU, detail::exp_to).
__device__ __forceinline__ float exp_of(double v) {
  return exp_clamped(static_cast<float>(v));
}

// softplus as Mamba's kernels compute it: log(1 + exp(v)) for v <= 20, v above; its derivative
// sigmoid(v), 1 above 20.
__device__ __forceinline__ float softplus(float v) {
  return v > 20.0f ? v : log1pf(expf(v));
}
__device__ __forceinline__ float softplus_grad(float v) {
  return v > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-v));
}

// ---- reductions ----

// The sum of one value per thread over a block of exactly kThreads threads (a power of 2), as a
// tree in shared memory: the order of the additions depends on kThreads alone, so a result is
// the same on every run. Every thread gets the sum. Every thread of the block must call it.
template <int kThreads>
__device__ float block_sum(float value) {
  static_assert(kThreads >= 1 && kThreads <= 1024 && (kThreads & (kThreads - 1)) == 0,
                "block_sum needs a power-of-2 block of at most 1024 threads");
  __shared__ float partial[kThreads];
  const unsigned t = threadIdx.x;
  partial[t] = value;
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) partial[t] += partial[t + half];
    __syncthreads();
  }
  const float sum = partial[0];
  __syncthreads();  // the next call may overwrite partial[]
  return sum;
}

// Threads of the block-per-row kernels (one block reduces one row).
constexpr int kRowThreads = 128;
// Threads of the elementwise kernels.
constexpr int kThreads = 256;

// ---- launch sizes ----

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

// One block per row: the grid's x dimension holds up to 2^31 - 1 blocks.
inline unsigned row_blocks(int64_t rows) {
  constexpr int64_t kMaxGridX = 2147483647;
  if (rows > kMaxGridX)
    throw std::length_error("mamba.mixer: " + std::to_string(rows) + " rows exceed one kernel launch");
  return static_cast<unsigned>(rows);
}

// Rows per block of a two-pass column sum (partial sums over blocks of rows, then the partials
// added in block order): from the row count alone, never from the device, at least 16 rows and at
// most 512 blocks, so the order of every such sum is fixed by the problem's size.
inline int64_t rows_per_block(int64_t rows) {
  constexpr int64_t kMinRowsPerBlock = 16, kMaxRowBlocks = 512;
  return std::max(kMinRowsPerBlock, (rows + kMaxRowBlocks - 1) / kMaxRowBlocks);
}
inline int64_t row_block_count(int64_t rows) {
  const int64_t per = rows_per_block(rows);
  return (rows + per - 1) / per;
}

// Right after a launch: a bad configuration (or an earlier asynchronous failure) as a CudaError
// naming the kernel.
inline void check_launch(const char* kernel) {
  PLEXUS_CUDA_CHECK(cudaGetLastError(), kernel);
}

}  // namespace plexus::mamba::cuda

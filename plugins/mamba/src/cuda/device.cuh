// For the layer's .cu files: the scalar functions of the CPU path (math.hpp) on the device, the
// row launch sizes, and plexus_cuda_layer's block reduction, launch sizes and launch check
// (plugins/common/cuda_layer). Written to be read against the CPU code: no warp shuffles, no
// atomics.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "plexus_cuda_layer/device.cuh"

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

// ---- reductions and launch sizes (plexus_cuda_layer's) ----

using cuda_layer::block_sum;
using cuda_layer::blocks_for;
using cuda_layer::check_launch;
using cuda_layer::global_thread;
using cuda_layer::grid_threads;
// Threads of the elementwise kernels.
using cuda_layer::kThreads;

// Threads of the block-per-row kernels (one block reduces one row).
constexpr int kRowThreads = 128;

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

}  // namespace plexus::mamba::cuda

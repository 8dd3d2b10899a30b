// Internal: what the kernels share: the device types behind the interface types, fp32
// conversions, deterministic block reductions, launch sizes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "plexus_cuda_kernels/device_types.cuh"
#include "plexus_cuda_kernels/types.hpp"

namespace plexus::cuda_kernels::detail {

// exp with its argument clamped to [-87, 88] like the CPU library's fp32 exp: results never
// overflow (so silu's exp(-g) stays finite for very negative g) and NaN stays NaN (comparisons,
// not fminf/fmaxf, which would drop it).
__device__ __forceinline__ float exp_clamped(float x) {
  x = x > 88.0f ? 88.0f : x;
  x = x < -87.0f ? -87.0f : x;
  return expf(x);
}

template <class V>
struct SumOp {
  __device__ __forceinline__ V operator()(V a, V b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces one value per thread over the block and returns the result to every thread. blockDim.x
// must be a multiple of 32 (at most 1024). The order of operations depends only on blockDim.x
// (butterfly within warps, then over the warps' results), so results are deterministic; a + b ==
// b + a exactly, so every lane of the butterfly holds the same value.
template <class V, class Op>
__device__ V block_reduce(V value, Op op, V identity) {
  __shared__ V partial[32];
  for (int offset = 16; offset > 0; offset >>= 1)
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned warps = blockDim.x >> 5;
  __syncthreads();  // an earlier reduction in this kernel may still be reading `partial`
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < warps ? partial[lane] : identity;
    for (int offset = 16; offset > 0; offset >>= 1)
      value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
    if (lane == 0) partial[0] = value;
  }
  __syncthreads();
  return partial[0];
}

template <class V>
__device__ __forceinline__ V block_sum(V value) {
  return block_reduce(value, SumOp<V>{}, V(0));
}
__device__ __forceinline__ float block_max(float value) {
  return block_reduce(value, MaxOp{}, -INFINITY);
}

// Grid-stride loops: a global thread index and the grid's total number of threads, in int64.
__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

constexpr int kElementwiseThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill any current GPU many times over,
// capped so that the block count stays a valid grid dimension.
inline unsigned elementwise_blocks(int64_t n, int threads = kElementwiseThreads) {
  constexpr int64_t kMaxBlocks = 65535;
  return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxBlocks));
}

// One block per row: the grid's x dimension bounds the number of rows.
inline unsigned row_blocks(int64_t rows, const char* where) {
  constexpr int64_t kMaxGridX = 2147483647;
  if (rows > kMaxGridX)
    throw std::invalid_argument(std::string(where) + ": " + std::to_string(rows) + " rows exceed one launch");
  return static_cast<unsigned>(rows);
}

// Threads for one block per row of `cols` elements: whole warps, no more than the row needs
// (up to 512, beyond which each thread loops).
inline unsigned row_threads(int64_t cols) {
  return static_cast<unsigned>(std::clamp<int64_t>((cols + 31) / 32 * 32, 32, 512));
}

// Sub-buffers of one scratch allocation, each aligned to 256 bytes (what cudaMalloc guarantees,
// and what CUB and cuBLAS expect).
class Carve {
 public:
  explicit Carve(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  template <class T>
  T* take(std::size_t n) {
    T* p = base_ != nullptr ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += (n * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  std::size_t bytes() const { return offset_; }

 private:
  char* base_;
  std::size_t offset_ = 0;
};

}  // namespace plexus::cuda_kernels::detail

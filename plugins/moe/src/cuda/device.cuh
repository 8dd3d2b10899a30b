// For the layer's .cu files: the launch sizes, the launch check and the block reduction of
// plexus_cuda_layer (plugins/common/cuda_layer), the reduction over this layer's blocks.
#pragma once

#include "plexus_cuda_layer/device.cuh"

namespace plexus::moe::cuda {

using cuda_layer::blocks_for;
using cuda_layer::check_launch;
using cuda_layer::global_thread;
using cuda_layer::grid_threads;
using cuda_layer::kThreads;

// Threads of the block-per-row (or per-column) reductions.
constexpr int kReduceThreads = 128;

// The sum of one value per thread over a block of exactly kReduceThreads threads, in an order
// that depends on the block size alone; every thread gets it, and every thread of the block must
// call it.
template <class V>
__device__ __forceinline__ V block_sum(V value) {
  return cuda_layer::block_sum<kReduceThreads, V>(value);
}

}  // namespace plexus::moe::cuda

// One forward or backward of the layer on its GPU, as the host code of src/cuda/ sees it: the
// layer's handle bound to the call's stream (products), the stream (kernels), and the arena for
// the call's temporaries (freed, ordered after the stream, when the call ends).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "plexus_cuda_kernels/handle.hpp"
#include "plexus_cuda_layer/arena.hpp"

namespace plexus::mamba::cuda {

struct Call {
  plexus::cuda_kernels::Handle& handle;
  cudaStream_t stream;
  plexus::cuda_layer::Arena& temp;

  // n uninitialized temporaries of T (nullptr for 0).
  template <class T = float>
  T* take(int64_t n) {
    return temp.take<T>(static_cast<std::size_t>(n), stream);
  }
};

}  // namespace plexus::mamba::cuda

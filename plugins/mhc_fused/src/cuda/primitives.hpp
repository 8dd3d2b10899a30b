// The CUDA versions of the eight primitives, CudaPrimitives<A> with A the activation type: float
// or cuda_kernels::bfloat16; mappings are always float32 (the family's mapping dtype with either),
// so the mappings are CudaPrimitives<float>'s only. Each runs on handle.stream() with every tensor
// on the handle's device (the caller, plexus_mhc_backend's MhcCudaInstance, makes the device current,
// binds the stream and picks A from the dtype), enqueues its kernels and returns without waiting.
// The problem and arguments were checked by plexus/cpp/mhc.hpp. Plain C++, for plugin.cpp; the
// definitions are in the .cu file of each pair, instantiated there.
#pragma once

#include "../fused.hpp"
#include "plexus_cuda_kernels/handle.hpp"
#include "plexus_cuda_kernels/types.hpp"

namespace plexus::mhc_fused::gpu {

using cuda_kernels::bfloat16;
using cuda_kernels::Handle;

PLEXUS_MHC_PRIMITIVES_WITH(CudaPrimitives, Handle&);

}  // namespace plexus::mhc_fused::gpu

// The CUDA versions of the eight primitives, float32 activations and float32 mappings:
// CudaPrimitives<float> (A, the activation type, is float only: the kernels are written for it,
// and instantiated for it).
// Each runs on handle.stream() with every tensor on the handle's device (the caller,
// plexus_mhc_backend's MhcCudaInstance, makes the device current, binds the stream and checks the
// dtype), enqueues its kernels and returns without waiting. The problem and arguments were
// checked by plexus/cpp/mhc.hpp. Plain C++, for plugin.cpp; the definitions are in the .cu file
// of each pair.
#pragma once

#include "../native.hpp"
#include "plexus_cuda_kernels/handle.hpp"

namespace plexus::mhc_native::gpu {

using cuda_kernels::Handle;

PLEXUS_MHC_PRIMITIVES_WITH(CudaPrimitives, Handle&);

}  // namespace plexus::mhc_native::gpu

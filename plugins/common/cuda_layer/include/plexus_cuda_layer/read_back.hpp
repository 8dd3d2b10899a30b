// One value of device memory read back to the host, for the few checks a layer can only make on
// the device's data (an out-of-range token id or target, found by a kernel). It synchronizes the
// stream: keep it off the path of every call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace plexus::cuda_layer {

// Copies *value (device memory) to the host after the work queued on `stream`; for T = int32_t
// and int64_t. Throws plexus_cuda_kernels' CudaError when the copy fails.
template <class T>
T read_back(const T* value, cudaStream_t stream);

}  // namespace plexus::cuda_layer

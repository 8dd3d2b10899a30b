#include "plexus_cuda_kernels/current_device.hpp"

#include <cuda_runtime_api.h>

#include "plexus_cuda_kernels/error.hpp"

namespace plexus::cuda_kernels {

CurrentDevice::CurrentDevice(int device) {
  PLEXUS_CUDA_CHECK(cudaGetDevice(&previous_), "CurrentDevice");
  if (previous_ == device) return;
  PLEXUS_CUDA_CHECK(cudaSetDevice(device), "CurrentDevice");
  changed_ = true;
}

CurrentDevice::~CurrentDevice() {
  if (changed_) static_cast<void>(cudaSetDevice(previous_));
}

}  // namespace plexus::cuda_kernels

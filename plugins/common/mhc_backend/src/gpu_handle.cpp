// GpuHandle (cuda_instance.hpp): the GPU's presence is checked before its Handle is created on it.
#include <cuda_runtime_api.h>

#include <string>

#include "plexus/cpp/host.hpp"
#include "plexus_mhc_backend/cuda_instance.hpp"

namespace plexus::mhc_backend {

GpuHandle::GpuHandle(const char* backend, int device_id, const cuda_kernels::HandleOptions& options)
    : device_(device_id) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // clear the error: it is reported here, not later
    count = 0;
  }
  if (device_id < 0 || device_id >= count)
    throw plexus::sdk::Error(PLX_ERR_UNSUPPORTED, std::string(backend) + ": there is no CUDA device cuda:" +
                                                      std::to_string(device_id) + " here (" +
                                                      std::to_string(count) + " visible)");
  const cuda_kernels::CurrentDevice current(device_);
  handle_ = std::make_unique<cuda_kernels::Handle>(nullptr, options);
}

GpuHandle::~GpuHandle() {
  // The Handle's cuBLAS handle and buffers belong to this device.
  if (handle_ == nullptr) return;
  try {
    const cuda_kernels::CurrentDevice current(device_);
    handle_.reset();
  } catch (...) {  // a destructor must not throw; the buffers are released with the context
  }
}

cudaStream_t GpuHandle::native_stream(plx_stream stream) {
  return static_cast<cudaStream_t>(plexus::sdk::Host::current().stream_native(stream));
}

}  // namespace plexus::mhc_backend

#include "device_ops.hpp"

#include <cstring>

#include "plexus/cpp/error.hpp"
#include "plexus/cpp/tensor.hpp"

namespace fsdp {

using plexus::sdk::Error;

void expect_supported_device(DLDevice device, const std::string& what) {
  if (device.device_type == kDLCPU) return;
  if (device.device_type == kDLCUDA && cuda::available()) return;
  if (device.device_type == kDLCUDA)
    throw Error(PLX_ERR_UNSUPPORTED, what + ": on " + plexus::sdk::device_text(device) +
                                         ", but this fsdp plugin was built without CUDA (build with "
                                         "-DPLEXUS_WITH_CUDA=ON for CUDA units)");
  throw Error(PLX_ERR_UNSUPPORTED, what + ": on " + plexus::sdk::device_text(device) +
                                       "; the fsdp strategies run on the CPU and CUDA devices");
}

void copy_elements(DLDevice device, float* to, const float* from, int64_t count) {
  if (count <= 0 || to == from) return;
  if (device.device_type == kDLCUDA) return cuda::copy(device.device_id, to, from, count);
  std::memcpy(to, from, static_cast<std::size_t>(count) * sizeof(float));
}

void zero_elements(DLDevice device, float* to, int64_t count) {
  if (count <= 0) return;
  if (device.device_type == kDLCUDA) return cuda::zero(device.device_id, to, count);
  std::memset(to, 0, static_cast<std::size_t>(count) * sizeof(float));
}

void add_elements(DLDevice device, float* to, const float* from, int64_t count) {
  if (count <= 0) return;
  if (device.device_type == kDLCUDA) return cuda::add(device.device_id, to, from, count);
  for (int64_t i = 0; i < count; ++i) to[i] += from[i];
}

void scale_elements(DLDevice device, float* to, double factor, int64_t count) {
  if (count <= 0) return;
  const auto f = static_cast<float>(factor);
  if (device.device_type == kDLCUDA) return cuda::scale(device.device_id, to, f, count);
  for (int64_t i = 0; i < count; ++i) to[i] *= f;
}

}  // namespace fsdp

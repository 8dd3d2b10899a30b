// The element operations the strategies run on their float32 buffers, on the CPU or, in a build
// with CUDA, on a CUDA device (cuda/device_ops.cu); elsewhere a CUDA device is refused.
#pragma once

#include <cstdint>
#include <string>

#include "plexus/tensor.h"

namespace fsdp {

// Throws plexus::sdk::Error naming `what` when this build cannot run the operations on `device`.
void expect_supported_device(DLDevice device, const std::string& what);

void copy_elements(DLDevice device, float* to, const float* from, int64_t count);
void zero_elements(DLDevice device, float* to, int64_t count);
void add_elements(DLDevice device, float* to, const float* from, int64_t count);  // to += from
void scale_elements(DLDevice device, float* to, double factor, int64_t count);

// The CUDA side, defined by cuda/device_ops.cu or, in a build without CUDA, cuda_absent.cpp.
namespace cuda {
bool available() noexcept;
void copy(int32_t device_id, float* to, const float* from, int64_t count);
void zero(int32_t device_id, float* to, int64_t count);
void add(int32_t device_id, float* to, const float* from, int64_t count);
void scale(int32_t device_id, float* to, float factor, int64_t count);
}  // namespace cuda

}  // namespace fsdp

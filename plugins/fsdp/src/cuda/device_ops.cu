// The element operations on a CUDA device: copies and zeroing through the runtime, the add and
// the scale as grid-stride kernels. Synchronous (the default stream, waited on), as the CPU path
// is: the strategies call them between communications the host orders on the same stream.
#include <cuda_runtime.h>

#include <string>

#include "device_ops.hpp"
#include "plexus/cpp/error.hpp"

namespace fsdp::cuda {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw plexus::sdk::Error(PLX_ERR_INTERNAL, std::string("fsdp: ") + what + ": " + cudaGetErrorString(status));
}

// Runs on `device_id` and puts the caller's current device back afterwards.
class OnDevice {
 public:
  explicit OnDevice(int32_t device_id) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device_id) check(cudaSetDevice(device_id), "cudaSetDevice");
  }
  ~OnDevice() { cudaSetDevice(previous_); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_ = 0;
};

__global__ void add_kernel(float* to, const float* from, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    to[i] += from[i];
}

__global__ void scale_kernel(float* to, float factor, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    to[i] *= factor;
}

constexpr int kThreads = 256;
unsigned int blocks_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < 4096 ? blocks : 4096);
}

}  // namespace

bool available() noexcept { return true; }

void copy(int32_t device_id, float* to, const float* from, int64_t count) {
  OnDevice on(device_id);
  check(cudaMemcpy(to, from, static_cast<size_t>(count) * sizeof(float), cudaMemcpyDeviceToDevice), "cudaMemcpy");
}

void zero(int32_t device_id, float* to, int64_t count) {
  OnDevice on(device_id);
  check(cudaMemset(to, 0, static_cast<size_t>(count) * sizeof(float)), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaMemset");
}

void add(int32_t device_id, float* to, const float* from, int64_t count) {
  OnDevice on(device_id);
  add_kernel<<<blocks_for(count), kThreads>>>(to, from, count);
  check(cudaGetLastError(), "the add kernel's launch");
  check(cudaDeviceSynchronize(), "the add kernel");
}

void scale(int32_t device_id, float* to, float factor, int64_t count) {
  OnDevice on(device_id);
  scale_kernel<<<blocks_for(count), kThreads>>>(to, factor, count);
  check(cudaGetLastError(), "the scale kernel's launch");
  check(cudaDeviceSynchronize(), "the scale kernel");
}

}  // namespace fsdp::cuda

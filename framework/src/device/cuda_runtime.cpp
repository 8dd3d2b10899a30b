// CUDA devices: one caching allocator per GPU over cudaMalloc/cudaFree, and the copies and
// synchronizations the host needs. Compiled only when the build has CUDA.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "device/device_internal.hpp"
#include "plexus/core/device.hpp"

namespace plexus::device {
namespace {

void check(cudaError_t status, const char* call, int device) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(call) + " on cuda:" + std::to_string(device) +
                             " failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

// Makes `device` current for the life of the guard, restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice", device);
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice", device);
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0, device_ = 0;
};

class CudaMalloc final : public memory::RawAllocator {
 public:
  explicit CudaMalloc(int device) : device_(device) {}
  void* allocate(std::size_t bytes) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error so later calls do not report it
      return nullptr;
    }
    check(status, "cudaMalloc", device_);
    return ptr;
  }
  void release(void* ptr) noexcept override {
    try {
      DeviceGuard guard(device_);  // throws when the device is already failing (a sticky error)
      cudaFree(ptr);
    } catch (...) {  // an exception leaving a noexcept function would terminate the process
    }
  }
  void synchronize() override {
    DeviceGuard guard(device_);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", device_);
  }
  std::string device_name() const override { return "cuda:" + std::to_string(device_); }

 private:
  int device_;
};

constexpr int kMaxDevices = 64;

memory::CachingAllocator& allocator(int device) {
  static std::array<std::unique_ptr<memory::CachingAllocator>, kMaxDevices> allocators;
  static std::mutex mutex;
  if (device < 0 || device >= kMaxDevices)
    throw std::runtime_error("cuda:" + std::to_string(device) + ": no such device");
  std::lock_guard lock(mutex);
  auto& slot = allocators[static_cast<std::size_t>(device)];
  if (!slot) slot = std::make_unique<memory::CachingAllocator>(std::make_unique<CudaMalloc>(device));
  return *slot;
}

}  // namespace

bool cuda_built() {
  return true;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU: report none, not an error
    return 0;
  }
  return count;
}

namespace detail {

void* cuda_allocate(int device, std::size_t bytes, const void* stream) {
  return allocator(device).allocate(bytes, stream);
}

void cuda_free(int device, void* ptr) noexcept {
  try {
    allocator(device).free(ptr);
  } catch (...) {  // freeing must not throw; the driver reclaims anything lost here at exit
  }
}

void cuda_zero(int device, void* ptr, std::size_t bytes, const void* stream) {
  DeviceGuard guard(device);
  check(cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(const_cast<void*>(stream))),
        "cudaMemsetAsync", device);
}

void cuda_copy(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy", -1);
}

void cuda_synchronize(int device) {
  DeviceGuard guard(device);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", device);
}

memory::AllocatorStats cuda_allocator_stats(int device) {
  return allocator(device).stats();
}

void* cuda_stream_create(int device, int priority) {
  DeviceGuard guard(device);
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange", device);
  // CUDA's range runs from `least` (lowest priority, usually 0) down to `greatest` (negative).
  const int clamped = std::max(greatest, std::min(least, priority));
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, clamped), "cudaStreamCreateWithPriority",
        device);
  return stream;
}

void cuda_stream_destroy(int device, void* stream) noexcept {
  try {
    DeviceGuard guard(device);
    cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  } catch (...) {  // destruction must not throw
  }
}

void cuda_stream_synchronize(int device, void* stream) {
  DeviceGuard guard(device);
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize", device);
}

void* cuda_event_create(int device) {
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  // Timing off: an event used for ordering only is cheaper to record and wait on.
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags", device);
  return event;
}

void cuda_event_destroy(int device, void* event) noexcept {
  try {
    DeviceGuard guard(device);
    cudaEventDestroy(static_cast<cudaEvent_t>(event));
  } catch (...) {  // destruction must not throw
  }
}

void cuda_event_record(int device, void* event, void* stream) {
  DeviceGuard guard(device);
  check(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
        "cudaEventRecord", device);
}

void cuda_stream_wait_event(int device, void* stream, void* event) {
  DeviceGuard guard(device);
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
        "cudaStreamWaitEvent", device);
}

void cuda_event_synchronize(int device, void* event) {
  DeviceGuard guard(device);
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize", device);
}

}  // namespace detail
}  // namespace plexus::device

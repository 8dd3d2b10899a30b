// plexus_cuda_kernels: owning device allocations (RAII over cudaMalloc / cudaFree).
#pragma once

#include <cstddef>
#include <vector>

#include "plexus_cuda_kernels/error.hpp"

namespace plexus::cuda_kernels {

// Untyped device memory of a fixed size, allocated on the current device. Move-only. cudaFree
// waits for the device, so work still using the memory finishes before it is released.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }
  void reset() noexcept;

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// n elements of T in device memory, with synchronous copies to and from host vectors (for tests,
// setup and checkpoints; the hot path uses the kernels' streams).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t n) : buffer_(n * sizeof(T)), size_(n) {}
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }

  T* data() const noexcept { return buffer_.as<T>(); }
  std::size_t size() const noexcept { return size_; }

  // Copies host.size() (<= size()) elements to the start of the array.
  void upload(const std::vector<T>& host) {
    if (host.size() > size_)
      throw std::invalid_argument("DeviceArray::upload: more elements than the array holds");
    if (!host.empty())
      PLEXUS_CUDA_CHECK(cudaMemcpy(data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                        "DeviceArray::upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    if (size_ != 0)
      PLEXUS_CUDA_CHECK(cudaMemcpy(host.data(), data(), size_ * sizeof(T), cudaMemcpyDeviceToHost),
                        "DeviceArray::download");
    return host;
  }

 private:
  DeviceBuffer buffer_;
  std::size_t size_ = 0;
};

}  // namespace plexus::cuda_kernels

#include "plexus_cuda_kernels/device_buffer.hpp"

#include <string>
#include <utility>

namespace plexus::cuda_kernels {

DeviceBuffer::DeviceBuffer(std::size_t bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    data_ = nullptr;
    check_cuda(status, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str(), "DeviceBuffer");
  }
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() {
  reset();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  // A failure here (a device already in an error state) cannot be reported from a destructor;
  // the error stays sticky and the next checked call reports it.
  if (data_ != nullptr) static_cast<void>(cudaFree(data_));
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace plexus::cuda_kernels

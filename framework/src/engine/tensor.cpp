#include "plexus/core/engine/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace plexus {

std::size_t dtype_bytes(DLDataType dtype) { return static_cast<std::size_t>(dtype.bits) / 8 * dtype.lanes; }

std::string dtype_name(DLDataType dtype) {
  const char* base = dtype.code == kDLFloat    ? "float"
                     : dtype.code == kDLInt    ? "int"
                     : dtype.code == kDLUInt   ? "uint"
                     : dtype.code == kDLBfloat ? "bfloat"
                                               : "dtype?";
  return base + std::to_string(dtype.bits);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void Tensor::Free::operator()(void* p) const noexcept { std::free(p); }

Tensor::Tensor(std::vector<int64_t> shape, DLDataType dtype, DLDevice device)
    : shape_(std::move(shape)), dtype_(dtype), device_(device), numel_(1) {
  if (device.device_type != kDLCPU)
    throw std::invalid_argument("tensors on device type " + std::to_string(device.device_type) +
                                " are not available in this build (CPU only)");
  for (int64_t d : shape_) {
    if (d < 0) throw std::invalid_argument("negative dimension in tensor shape " + shape_string(shape_));
    numel_ *= d;
  }
  // 64-byte alignment (a cache line; what vector units like), never a zero-size request.
  const std::size_t size = (std::max<std::size_t>(bytes(), 1) + 63) / 64 * 64;
  storage_.reset(std::aligned_alloc(64, size));
  if (!storage_) throw std::bad_alloc();
  std::memset(storage_.get(), 0, size);
}

DLTensor Tensor::view() const {
  DLTensor t{};
  t.data = storage_.get();
  t.device = device_;
  t.ndim = static_cast<int>(shape_.size());
  t.dtype = dtype_;
  t.shape = const_cast<int64_t*>(shape_.data());  // DLPack's field is non-const; never written
  t.strides = nullptr;
  t.byte_offset = 0;
  return t;
}

void Tensor::zero() {
  if (storage_) std::memset(storage_.get(), 0, bytes());
}

}  // namespace plexus

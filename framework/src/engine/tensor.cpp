#include "plexus/core/engine/tensor.hpp"

#include "plexus/core/device.hpp"
#include "plexus/tensor.h"

#include <stdexcept>

namespace plexus {

std::size_t dtype_bytes(DLDataType dtype) {
  return static_cast<std::size_t>(dtype.bits) / 8 * dtype.lanes;
}

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

void Tensor::Free::operator()(void* p) const noexcept {
  if (!borrowed) device::free(device, p);
}

Tensor::Tensor(std::vector<int64_t> shape, DLDataType dtype, DLDevice device,
               [[maybe_unused]] Uninitialized tag)
    : shape_(std::move(shape)), dtype_(dtype), device_(device), numel_(1), storage_(nullptr, Free{device, false}) {
  device::require(device);
  for (int64_t d : shape_) {
    if (d < 0) throw std::invalid_argument("negative dimension in tensor shape " + shape_string(shape_));
    numel_ *= d;
  }
  storage_.reset(device::allocate(device, bytes()));
}

Tensor::Tensor(std::vector<int64_t> shape, DLDataType dtype, DLDevice device)
    : Tensor(std::move(shape), dtype, device, Uninitialized{}) {
  device::zero(device, storage_.get(), bytes());
}

Tensor Tensor::uninitialized(std::vector<int64_t> shape, DLDataType dtype, DLDevice device) {
  return Tensor(std::move(shape), dtype, device, Uninitialized{});
}

Tensor Tensor::borrowed(void* data, std::vector<int64_t> shape, DLDataType dtype, DLDevice device) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.numel_ = 1;
  for (int64_t d : t.shape_) t.numel_ *= d;
  t.storage_ = std::unique_ptr<void, Free>(data, Free{device, true});
  return t;
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
  if (storage_) device::zero(device_, storage_.get(), bytes());
}

Tensor Tensor::to(DLDevice device) const {
  Tensor out(shape_, dtype_, device);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& other) {
  if (other.shape_ != shape_ || !plx_dtype_equal(other.dtype_, dtype_))
    throw std::invalid_argument("copy of a " + dtype_name(other.dtype_) + " " + shape_string(other.shape_) +
                                " tensor into a " + dtype_name(dtype_) + " " + shape_string(shape_) + " one");
  device::copy(storage_.get(), device_, other.storage_.get(), other.device_, bytes());
}

}  // namespace plexus

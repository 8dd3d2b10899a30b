// A host-owned tensor: contiguous storage on one device (the CPU, or a CUDA GPU through the
// device's caching allocator) plus its shape and dtype, and the DLTensor view handed to plugins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

namespace plexus {

std::size_t dtype_bytes(DLDataType dtype);
std::string dtype_name(DLDataType dtype);  // "float32", "int32", ...
std::string shape_string(const std::vector<int64_t>& shape);

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled.
  Tensor(std::vector<int64_t> shape, DLDataType dtype, DLDevice device = DLDevice{kDLCPU, 0});
  // Contents unspecified: for outputs that a call is contracted to write in full (the zero fill
  // would be one more pass over memory that is overwritten anyway).
  static Tensor uninitialized(std::vector<int64_t> shape, DLDataType dtype,
                              DLDevice device = DLDevice{kDLCPU, 0});
  // A view of memory owned elsewhere (a data-parallel strategy's unit buffer): never freed here,
  // valid while its owner keeps the memory.
  static Tensor borrowed(void* data, std::vector<int64_t> shape, DLDataType dtype, DLDevice device);

  const std::vector<int64_t>& shape() const noexcept { return shape_; }
  DLDataType dtype() const noexcept { return dtype_; }
  DLDevice device() const noexcept { return device_; }
  int64_t numel() const noexcept { return numel_; }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel_) * dtype_bytes(dtype_); }
  bool empty() const noexcept { return storage_ == nullptr; }

  void* raw() const noexcept { return storage_.get(); }
  template <class T>
  T* data() const noexcept {
    return static_cast<T*>(raw());
  }
  // A view for plugins; valid while this tensor lives (the shape array is owned here).
  DLTensor view() const;
  void zero();
  // A copy on `device` (the same storage layout); synchronous.
  Tensor to(DLDevice device) const;
  // Copies `other`'s contents (same shape and dtype, any device) into this tensor; synchronous.
  void copy_from(const Tensor& other);

 private:
  struct Uninitialized {};
  Tensor(std::vector<int64_t> shape, DLDataType dtype, DLDevice device, Uninitialized tag);

  struct Free {
    DLDevice device;  // no initializer: it would make Tensor() ill-formed while Free is nested
    bool borrowed;    // memory owned elsewhere: not freed
    void operator()(void* p) const noexcept;
  };
  std::vector<int64_t> shape_;
  DLDataType dtype_{};
  DLDevice device_{kDLCPU, 0};
  int64_t numel_ = 0;
  std::unique_ptr<void, Free> storage_;
};

}  // namespace plexus

// plexus_kernels: a growable, 64-byte-aligned scratch buffer for any arithmetic element type.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>

namespace plexus::kernels {

class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = other.data_;
      bytes_ = other.bytes_;
      other.data_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }

  // Room for n elements of T (contents unspecified when it grows); the pointer stays valid until
  // the next call that grows the buffer.
  template <class T>
  T* get(std::size_t n) {
    reserve(n * sizeof(T));
    return static_cast<T*>(data_);
  }
  // Room for n elements of T, all zero.
  template <class T>
  T* zeros(std::size_t n) {
    T* p = get<T>(n);
    if (n != 0) std::memset(static_cast<void*>(p), 0, n * sizeof(T));
    return p;
  }
  template <class T>
  T* data() const noexcept {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const noexcept { return bytes_; }
  void release() noexcept {
    if (data_ != nullptr) ::operator delete (data_, std::align_val_t{kAlignment});
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  static constexpr std::size_t kAlignment = 64;
  void reserve(std::size_t bytes) {
    if (bytes <= bytes_) return;
    void* fresh = ::operator new (bytes, std::align_val_t{kAlignment});
    release();
    data_ = fresh;
    bytes_ = bytes;
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace plexus::kernels

// Where mamba.mixer's large CPU buffers come from: the state a training forward keeps and every
// call's temporaries are taken from one cache for the whole plugin and given back when the state
// or the call ends. A training step then reuses the previous step's memory: glibc maps every
// block over 32 MiB fresh from the kernel (even under plexus-train's heap policy), and at
// 4 x 1024 tokens nearly every buffer of this layer is that large, so without the cache each call
// paid a page fault per 4 KiB it touched. Shared by every mamba.mixer layer; it keeps at most 64
// idle buffers (dropping the smallest beyond), so when shapes repeat, as in training, the memory
// it holds is what was in use at once at the peak.
#pragma once

#include <cstddef>

#include "plexus_kernels/buffer.hpp"

namespace plexus::mamba {

// A buffer lent by the cache; given back when destroyed or reassigned.
class Pooled {
 public:
  Pooled() = default;
  ~Pooled();
  Pooled(Pooled&& other) noexcept;
  Pooled& operator=(Pooled&& other) noexcept;
  Pooled(const Pooled&) = delete;
  Pooled& operator=(const Pooled&) = delete;

  // Room for n elements of T (contents unspecified): a cached buffer that fits, when there is one.
  template <class T>
  T* get(std::size_t n) {
    reserve(n * sizeof(T));
    return buffer_.get<T>(n);
  }
  template <class T>
  T* data() const noexcept {
    return buffer_.data<T>();
  }

 private:
  void reserve(std::size_t bytes);
  plexus::kernels::Buffer buffer_;
};

}  // namespace plexus::mamba

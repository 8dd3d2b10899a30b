// The temporaries of one call, carved from a Handle's device scratch (for plugins' CUDA code).
//
// Scratch is ordered on the Handle's stream: the previous call's kernels that used it were queued
// earlier on the same stream (Handle::set_stream orders a new stream after the old one), so
// reusing it needs no synchronization, and nothing is allocated per call once it has grown. A call
// describes its temporaries once, in a layout function taking pieces from a ScratchLayout;
// carve_scratch() runs that function twice: on a layout that only counts bytes, then on one over
// device memory of that size, so the two passes cannot disagree. Plain C++ (no CUDA syntax).
#pragma once

#include <cstddef>
#include <cstdint>

#include "plexus_cuda_kernels/handle.hpp"

namespace plexus::cuda_kernels {

class ScratchLayout {
 public:
  ScratchLayout() = default;  // counts bytes only: take() returns nullptr
  explicit ScratchLayout(void* base) : base_(static_cast<std::byte*>(base)) {}

  // `count` elements of T, 256-byte aligned (what cudaMalloc gives); nullptr for count <= 0.
  template <class T>
  T* take(int64_t count) {
    if (count <= 0) return nullptr;
    const std::size_t at = used_;
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(T);
    used_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
    return base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + at);
  }
  std::size_t bytes() const noexcept { return used_; }

 private:
  static constexpr std::size_t kAlignment = 256;
  std::byte* base_ = nullptr;
  std::size_t used_ = 0;
};

// Returns layout(scratch) for a ScratchLayout over the handle's device scratch (see above).
template <class Layout>
auto carve_scratch(Handle& handle, Layout&& layout) {
  ScratchLayout count;
  layout(count);
  ScratchLayout real(count.bytes() == 0 ? nullptr : handle.scratch(count.bytes()));
  return layout(real);
}

}  // namespace plexus::cuda_kernels

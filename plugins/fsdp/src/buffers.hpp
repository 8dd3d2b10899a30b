// What the strategies hold: float32 buffers from the host's allocator, counted in a ledger (for
// memory()), and communications in flight, each waited on exactly once.
#pragma once

#include <cstdint>

#include "plexus/cpp/host.hpp"
#include "plexus/data_parallel.h"

namespace fsdp {

enum class Holds { values, grads };

// Bytes held now and the most held at once, for values and gradients apart.
class Ledger {
 public:
  void add(Holds what, uint64_t bytes) noexcept;
  void remove(Holds what, uint64_t bytes) noexcept;
  plx_dp_memory snapshot() const noexcept;

 private:
  uint64_t now_[2] = {0, 0};
  uint64_t peak_[2] = {0, 0};
  uint64_t peak_total_ = 0;
};

// `numel` zeroed float32 elements on `device`, freed (and taken off the ledger) on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DLDevice device, int64_t numel, Holds what, Ledger& ledger);
  ~Buffer() { reset(); }
  Buffer(Buffer&& other) noexcept { *this = static_cast<Buffer&&>(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  float* data() const noexcept { return data_; }
  int64_t numel() const noexcept { return numel_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }
  void reset() noexcept;

 private:
  float* data_ = nullptr;
  int64_t numel_ = 0;
  DLDevice device_{kDLCPU, 0};
  Holds what_ = Holds::values;
  Ledger* ledger_ = nullptr;
};

// A started communication. wait() completes it; one never waited on (a strategy destroyed with
// work in flight) is completed by the destructor, its status dropped: nothing can report it.
class InFlight {
 public:
  InFlight() = default;
  explicit InFlight(plx_request request) noexcept : request_(request) {}
  ~InFlight();
  InFlight(InFlight&& other) noexcept : request_(other.request_) { other.request_ = nullptr; }
  InFlight& operator=(InFlight&& other) noexcept;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  bool pending() const noexcept { return request_ != nullptr; }
  void wait();

 private:
  plx_request request_ = nullptr;
};

// A 1-D float32 view of `count` elements from `first` of `data` (through byte_offset, as the
// host's own views are), its shape kept in `*shape`, which must outlive the view.
DLTensor flat_view(float* data, int64_t first, int64_t count, DLDevice device, int64_t* shape) noexcept;

}  // namespace fsdp

// Small pieces every part of comm_nccl uses: CUDA and NCCL failures as plexus::sdk::Error, the
// current-device guard, deadlines, and the back-off of the polling loops.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "plexus/cpp/error.hpp"
#include "plexus/cpp/tensor.hpp"
#include "plexus/tensor.h"

namespace plexus::comm_nccl {

using plexus::sdk::Error;
using Clock = std::chrono::steady_clock;

// Throws Error(PLX_ERR_INTERNAL) "<where>: <call> failed: <name> (<text>)" unless status is
// cudaSuccess; clears CUDA's last error so a later call does not report it again.
void check_cuda(cudaError_t status, const char* call, const std::string& where);
#define PLX_NCCL_CUDA(call, where) ::plexus::comm_nccl::check_cuda((call), #call, (where))

// The plx_status for an NCCL result: a bad argument or usage is the caller's, everything else a
// communication failure.
plx_status status_of(ncclResult_t result) noexcept;
// "ncclSystemError (unhandled system error ...): <NCCL's last error for comm>".
std::string nccl_text(ncclResult_t result, ncclComm_t comm);
// Throws Error(status_of(result)) "<where>: <call> failed: <nccl_text>" unless ncclSuccess.
void check_nccl(ncclResult_t result, const char* call, const std::string& where, ncclComm_t comm = nullptr);

using plexus::sdk::device_text;

// Makes `device` current and restores the caller's device on every path: the host and other
// plugins keep their own current device.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// A point in time after which a wait gives up, or none (a limit of 0 ms means no limit, as
// everywhere in comm.h).
class Deadline {
 public:
  static Deadline after_ms(uint64_t ms) { return Deadline(ms, Clock::now()); }
  Deadline(uint64_t ms, Clock::time_point from) : ms_(ms), from_(from) {}
  bool passed() const { return ms_ != 0 && Clock::now() - from_ >= std::chrono::milliseconds(ms_); }
  bool limited() const noexcept { return ms_ != 0; }
  uint64_t limit_ms() const noexcept { return ms_; }
  // What is left, for calls that take a duration (at least 1 ms while not passed); ms_ when unlimited.
  std::chrono::milliseconds left() const;
  double seconds_since_start() const { return std::chrono::duration<double>(Clock::now() - from_).count(); }

 private:
  uint64_t ms_;
  Clock::time_point from_;
};

// Polling without burning a core for long: yields for the first ~100 rounds (a collective that is
// about to finish costs microseconds, not a sleep's latency), then sleeps 20 us doubling to 1 ms.
class Backoff {
 public:
  void pause();

 private:
  int rounds_ = 0;
};

// "1.5 s", "250 ms"
std::string seconds_text(double seconds);

}  // namespace plexus::comm_nccl

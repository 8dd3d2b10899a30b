#include "support.hpp"

#include <cstdio>
#include <thread>

namespace plexus::comm_nccl {

void check_cuda(cudaError_t status, const char* call, const std::string& where) {
  if (status == cudaSuccess) return;
  static_cast<void>(cudaGetLastError());  // not sticky: reported here, not by the next call
  throw Error(PLX_ERR_INTERNAL, where + ": " + call + " failed: " + cudaGetErrorName(status) + " (" +
                                    cudaGetErrorString(status) + ")");
}

plx_status status_of(ncclResult_t result) noexcept {
  switch (result) {
    case ncclSuccess:
      return PLX_OK;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return PLX_ERR_INVALID_ARGUMENT;
    default:
      return PLX_ERR_COMM;
  }
}

std::string nccl_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') text += ": " + std::string(last);
  return text;
}

void check_nccl(ncclResult_t result, const char* call, const std::string& where, ncclComm_t comm) {
  if (result == ncclSuccess) return;
  throw Error(status_of(result), where + ": " + call + " failed: " + nccl_text(result, comm));
}

CurrentDevice::CurrentDevice(int device) {
  PLX_NCCL_CUDA(cudaGetDevice(&previous_), "nccl");
  if (previous_ == device) return;
  PLX_NCCL_CUDA(cudaSetDevice(device), "nccl");
  changed_ = true;
}

CurrentDevice::~CurrentDevice() {
  if (changed_) static_cast<void>(cudaSetDevice(previous_));
}

std::chrono::milliseconds Deadline::left() const {
  if (ms_ == 0) return std::chrono::milliseconds(0);
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - from_);
  const auto limit = std::chrono::milliseconds(ms_);
  return spent >= limit ? std::chrono::milliseconds(0)
                        : std::max(limit - spent, std::chrono::milliseconds(1));
}

void Backoff::pause() {
  if (rounds_ < 100) {
    ++rounds_;
    std::this_thread::yield();
    return;
  }
  const int doublings = std::min(rounds_ - 100, 6);  // 20 us * 2^6 = 1.28 ms, capped at 1 ms
  ++rounds_;
  std::this_thread::sleep_for(
      std::min(std::chrono::microseconds(20 << doublings), std::chrono::microseconds(1000)));
}

std::string seconds_text(double seconds) {
  char text[32];
  if (seconds < 1.0)
    std::snprintf(text, sizeof(text), "%.0f ms", seconds * 1e3);
  else
    std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

}  // namespace plexus::comm_nccl

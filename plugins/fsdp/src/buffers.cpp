#include "buffers.hpp"

#include <algorithm>

#include "device_ops.hpp"

namespace fsdp {

using plexus::sdk::Host;

void Ledger::add(Holds what, uint64_t bytes) noexcept {
  const auto i = static_cast<int>(what);
  now_[i] += bytes;
  peak_[i] = std::max(peak_[i], now_[i]);
  peak_total_ = std::max(peak_total_, now_[0] + now_[1]);
}

void Ledger::remove(Holds what, uint64_t bytes) noexcept { now_[static_cast<int>(what)] -= bytes; }

plx_dp_memory Ledger::snapshot() const noexcept {
  plx_dp_memory m{};
  m.struct_size = sizeof(m);
  m.param_bytes = now_[0];
  m.grad_bytes = now_[1];
  m.peak_param_bytes = peak_[0];
  m.peak_grad_bytes = peak_[1];
  m.peak_bytes = peak_total_;
  return m;
}

Buffer::Buffer(DLDevice device, int64_t numel, Holds what, Ledger& ledger)
    : numel_(numel), device_(device), what_(what), ledger_(&ledger) {
  const uint64_t bytes = static_cast<uint64_t>(numel) * sizeof(float);
  data_ = static_cast<float*>(Host::current().alloc(device, bytes == 0 ? sizeof(float) : bytes, 64));
  ledger_->add(what_, bytes);
  try {
    zero_elements(device_, data_, numel_);
  } catch (...) {
    reset();
    throw;
  }
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    numel_ = other.numel_;
    device_ = other.device_;
    what_ = other.what_;
    ledger_ = other.ledger_;
    other.data_ = nullptr;
    other.numel_ = 0;
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (data_ == nullptr) return;
  Host::current().free(device_, data_);
  ledger_->remove(what_, static_cast<uint64_t>(numel_) * sizeof(float));
  data_ = nullptr;
  numel_ = 0;
}

InFlight::~InFlight() {
  if (request_ == nullptr) return;
  const plx_host_api* api = plexus::sdk::detail::host_slot();
  if (api != nullptr) (void)api->request_wait(api->ctx, request_);
}

InFlight& InFlight::operator=(InFlight&& other) noexcept {
  if (this != &other) {
    InFlight dropped(request_);
    request_ = other.request_;
    other.request_ = nullptr;
  }
  return *this;
}

void InFlight::wait() {
  if (request_ == nullptr) return;
  const plx_request request = request_;
  request_ = nullptr;
  const plx_host_api* api = Host::current().api();
  plexus::sdk::check_host(api->request_wait(api->ctx, request));
}

DLTensor flat_view(float* data, int64_t first, int64_t count, DLDevice device, int64_t* shape) noexcept {
  *shape = count;
  DLTensor t{};
  t.data = data;
  t.device = device;
  t.ndim = 1;
  t.dtype = plx_dtype_f32();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = static_cast<uint64_t>(first) * sizeof(float);
  return t;
}

}  // namespace fsdp

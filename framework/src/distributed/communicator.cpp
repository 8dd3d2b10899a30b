#include "plexus/core/distributed/communicator.hpp"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "plexus/core/components.hpp"

namespace plexus::distributed {

uint64_t tensor_bytes(const DLTensor& t) noexcept {
  uint64_t n = 1;
  for (int32_t d = 0; d < t.ndim; ++d) n *= static_cast<uint64_t>(t.shape[d]);
  return n * ((static_cast<uint64_t>(t.dtype.bits) * t.dtype.lanes + 7) / 8);
}

Request::Request(Request&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)), handle_(std::exchange(other.handle_, nullptr)) {}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) (void)comm_->table().wait(comm_->handle(), handle_, 0);
    comm_ = std::exchange(other.comm_, nullptr);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Request::~Request() {
  if (handle_ != nullptr) {
    (void)comm_->table().wait(comm_->handle(), handle_, 0);
    (void)HostServices::take_last_error();
  }
}

void Request::wait() {
  if (handle_ == nullptr) return;
  void* handle = std::exchange(handle_, nullptr);  // released by wait, whatever it returns
  comm_->check("wait", comm_->table().wait(comm_->handle(), handle, 0));
}

Communicator::Communicator(const Component& component, void* handle, std::string name)
    : component_(&component), table_(&component.as<plx_comm_v1>()), handle_(handle), name_(std::move(name)) {
  check("rank_size", table_->rank_size(handle_, &rank_, &size_));
}

Communicator::~Communicator() {
  if (handle_ != nullptr) table_->destroy(handle_);
}

void Communicator::check(const char* operation, plx_status status) const {
  if (status == PLX_OK) return;
  check_call(
      *component_,
      (std::string(operation) + " on group '" + name_ + "' (" + std::to_string(size_) + " ranks)").c_str(),
      status);
}

const char* collective_name(Collective kind) noexcept {
  static constexpr const char* kNames[kCollectiveKinds] = {
      "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send", "recv"};
  return kNames[static_cast<std::size_t>(kind)];
}

void Communicator::count(Collective kind, uint64_t bytes) const noexcept {
  calls_[static_cast<std::size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
  bytes_[static_cast<std::size_t>(kind)].fetch_add(bytes, std::memory_order_relaxed);
}

Traffic Communicator::traffic() const noexcept {
  Traffic t;
  for (std::size_t k = 0; k < kCollectiveKinds; ++k) {
    t.calls[k] = calls_[k].load(std::memory_order_relaxed);
    t.bytes[k] = bytes_[k].load(std::memory_order_relaxed);
  }
  return t;
}

void Communicator::all_reduce(const DLTensor& buffer, ReduceOp op) const {
  count(Collective::all_reduce, tensor_bytes(buffer));
  check("all_reduce", table_->all_reduce(handle_, &buffer, const_cast<DLTensor*>(&buffer),
                                         static_cast<int32_t>(op), nullptr, nullptr));
}

double Communicator::all_reduce(double value, ReduceOp op) const {
  int64_t one = 1;
  const DLTensor scalar{&value, DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 64, 1}, &one, nullptr, 0};
  all_reduce(scalar, op);
  return value;
}

Request Communicator::start_all_reduce(const DLTensor& buffer, ReduceOp op, plx_stream stream) const {
  count(Collective::all_reduce, tensor_bytes(buffer));
  void* request = nullptr;
  check("all_reduce", table_->all_reduce(handle_, &buffer, const_cast<DLTensor*>(&buffer),
                                         static_cast<int32_t>(op), stream, &request));
  return Request(this, request);
}

Request Communicator::start_send(const DLTensor& buffer, int32_t peer, int32_t tag) const {
  count(Collective::send, tensor_bytes(buffer));
  void* request = nullptr;
  check("send", table_->send(handle_, &buffer, peer, tag, nullptr, &request));
  return Request(this, request);
}

Request Communicator::start_recv(const DLTensor& buffer, int32_t peer, int32_t tag) const {
  count(Collective::recv, tensor_bytes(buffer));
  void* request = nullptr;
  check("recv", table_->recv(handle_, const_cast<DLTensor*>(&buffer), peer, tag, nullptr, &request));
  return Request(this, request);
}

void Communicator::all_gather(const DLTensor& send, const DLTensor& recv) const {
  count(Collective::all_gather, tensor_bytes(recv));
  check("all_gather", table_->all_gather(handle_, &send, const_cast<DLTensor*>(&recv), nullptr, nullptr));
}

void Communicator::broadcast(const DLTensor& buffer, int32_t root) const {
  count(Collective::broadcast, tensor_bytes(buffer));
  check("broadcast", table_->broadcast(handle_, const_cast<DLTensor*>(&buffer), root, nullptr, nullptr));
}

void Communicator::barrier() const {
  check("barrier", table_->barrier(handle_));
}

std::unique_ptr<Communicator> Communicator::split(int32_t color, int32_t key, std::string name) const {
  void* out = nullptr;
  check(("split into '" + name + "'").c_str(), table_->split(handle_, color, key, &out));
  if (out == nullptr) return nullptr;
  return std::make_unique<Communicator>(*component_, out, std::move(name));
}

void Communicator::abort(const std::string& reason) const noexcept {
  std::fflush(stdout);
  std::fflush(stderr);
  if (table_->abort != nullptr) (void)table_->abort(handle_, reason.c_str());
  std::_Exit(1);  // the backend had no abort, or its abort returned
}

}  // namespace plexus::distributed

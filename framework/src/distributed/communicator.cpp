#include "plexus/core/distributed/communicator.hpp"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "plexus/core/components.hpp"

namespace plexus::distributed {

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

void Communicator::all_reduce(const DLTensor& buffer, ReduceOp op) const {
  check("all_reduce", table_->all_reduce(handle_, &buffer, const_cast<DLTensor*>(&buffer),
                                         static_cast<int32_t>(op), nullptr, nullptr));
}

Request Communicator::start_all_reduce(const DLTensor& buffer, ReduceOp op, plx_stream stream) const {
  void* request = nullptr;
  check("all_reduce", table_->all_reduce(handle_, &buffer, const_cast<DLTensor*>(&buffer),
                                         static_cast<int32_t>(op), stream, &request));
  return Request(this, request);
}

Request Communicator::start_send(const DLTensor& buffer, int32_t peer, int32_t tag) const {
  void* request = nullptr;
  check("send", table_->send(handle_, &buffer, peer, tag, nullptr, &request));
  return Request(this, request);
}

Request Communicator::start_recv(const DLTensor& buffer, int32_t peer, int32_t tag) const {
  void* request = nullptr;
  check("recv", table_->recv(handle_, const_cast<DLTensor*>(&buffer), peer, tag, nullptr, &request));
  return Request(this, request);
}

void Communicator::all_gather(const DLTensor& send, const DLTensor& recv) const {
  check("all_gather", table_->all_gather(handle_, &send, const_cast<DLTensor*>(&recv), nullptr, nullptr));
}

void Communicator::broadcast(const DLTensor& buffer, int32_t root) const {
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

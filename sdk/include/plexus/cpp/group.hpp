// Plexus SDK C++ helpers: a process group of the host (plx_host_api's group functions) by name,
// with its collectives on DLTensor views. A layer asks for "tp" or "ep" and works the same with
// no group (a single process, a host without a runtime): then it is a group of one rank whose
// collectives leave every tensor as it is.
#ifndef PLEXUS_CPP_GROUP_HPP
#define PLEXUS_CPP_GROUP_HPP

#include <cstdint>
#include <string>

#include "plexus/cpp/error.hpp"
#include "plexus/cpp/host.hpp"
#include "plexus/host.h"

namespace plexus::sdk {

class Group {
 public:
  // The host's group `name`, or a group of one rank when the host has none by that name.
  static Group find(const Host& host, const char* name) {
    Group g;
    g.name_ = name;
    const plx_host_api* api = host.api();
    if (api->group_get == nullptr || api->group_rank == nullptr) return g;
    plx_group group = nullptr;
    if (api->group_get(api->ctx, name, &group) != PLX_OK || group == nullptr) return g;
    int32_t rank = 0, size = 1;
    check_host(api->group_rank(api->ctx, group, &rank, &size));
    g.api_ = api;
    g.group_ = group;
    g.rank_ = rank;
    g.size_ = size;
    return g;
  }

  int32_t rank() const noexcept { return rank_; }
  int32_t size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }

  // In place over the group (blocking); nothing to do on one rank.
  void all_reduce(DLTensor& tensor, int32_t op = PLX_REDUCE_SUM) const {
    if (size_ > 1) check_host(api_->all_reduce(api_->ctx, group_, &tensor, &tensor, op, nullptr, nullptr));
  }
  // Starts an in-place all-reduce and returns its request (nullptr on one rank); finish() completes it.
  plx_request start_all_reduce(DLTensor& tensor, int32_t op = PLX_REDUCE_SUM) const {
    if (size_ <= 1) return nullptr;
    plx_request request = nullptr;
    check_host(api_->all_reduce(api_->ctx, group_, &tensor, &tensor, op, nullptr, &request));
    return request;
  }
  void finish(plx_request request) const {
    if (request != nullptr) check_host(api_->request_wait(api_->ctx, request));
  }
  // Point to point, started (nullptr on one rank); finish() completes it. tag tells apart the
  // messages between the same two ranks.
  plx_request start_send(const DLTensor& buffer, int32_t peer, int32_t tag) const {
    if (size_ <= 1) return nullptr;
    plx_request request = nullptr;
    check_host(api_->send(api_->ctx, group_, &buffer, peer, tag, nullptr, &request));
    return request;
  }
  plx_request start_recv(DLTensor& buffer, int32_t peer, int32_t tag) const {
    if (size_ <= 1) return nullptr;
    plx_request request = nullptr;
    check_host(api_->recv(api_->ctx, group_, &buffer, peer, tag, nullptr, &request));
    return request;
  }

  // recv holds size() x send, in rank order.
  void all_gather(const DLTensor& send, DLTensor& recv) const {
    check_host(api_->all_gather(api_->ctx, group_, &send, &recv, nullptr, nullptr));
  }
  // send holds size() x recv; rank r gets the sum of every rank's chunk r. Started; finish() it.
  plx_request start_reduce_scatter(const DLTensor& send, DLTensor& recv, int32_t op = PLX_REDUCE_SUM) const {
    plx_request request = nullptr;
    check_host(api_->reduce_scatter(api_->ctx, group_, &send, &recv, op, nullptr, &request));
    return request;
  }
  void reduce_scatter(const DLTensor& send, DLTensor& recv, int32_t op = PLX_REDUCE_SUM) const {
    check_host(api_->reduce_scatter(api_->ctx, group_, &send, &recv, op, nullptr, nullptr));
  }

  // Blocks of rows, one per rank in rank order (a sequence-parallel layer's tokens): every rank's
  // `local` [rows, cols] gathered into `all` [size() x rows, cols], and the ranks' `all` summed
  // with rank r keeping block r in `local` (started; finish() it). Contiguous, of `dtype`, on
  // `device`.
  void gather_rows(const void* local, void* all, int64_t rows, int64_t cols, DLDataType dtype,
                   DLDevice device) const {
    int64_t local_shape[2] = {rows, cols}, all_shape[2] = {rows * size_, cols};
    const DLTensor send{const_cast<void*>(local), device, 2, dtype, local_shape, nullptr, 0};
    DLTensor recv{all, device, 2, dtype, all_shape, nullptr, 0};
    all_gather(send, recv);
  }
  plx_request start_scatter_sum_rows(void* all, void* local, int64_t rows, int64_t cols, DLDataType dtype,
                                     DLDevice device) const {
    int64_t local_shape[2] = {rows, cols}, all_shape[2] = {rows * size_, cols};
    const DLTensor send{all, device, 2, dtype, all_shape, nullptr, 0};
    DLTensor recv{local, device, 2, dtype, local_shape, nullptr, 0};
    return start_reduce_scatter(send, recv);
  }

 private:
  const plx_host_api* api_ = nullptr;
  plx_group group_ = nullptr;
  int32_t rank_ = 0, size_ = 1;
  std::string name_;
};

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_GROUP_HPP

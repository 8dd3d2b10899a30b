// The comm_local plugin: one comm component, "local", for a job of one process. With a single
// rank every collective is a copy from send to recv (nothing at all in place), a broadcast from
// rank 0 changes nothing, and there is no peer for point-to-point. Calls complete before they
// return, so a request is a token that wait accepts at once. It still checks every argument
// as a multi-rank backend would, so code that runs here with one rank is correct for many.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "plexus/comm.h"
#include "plexus/cpp/plugin.hpp"
#include "plexus/cpp/tensor.hpp"

namespace plexus::comm_local {
namespace {

using plexus::sdk::dtype_name;
using plexus::sdk::Error;
using plexus::sdk::guard;

struct LocalComm {
  std::string label;  // "world", "world/0", ...
  std::string call(const std::string& name) const { return name + " (" + label + ", 1 rank)"; }
};

// Every request: the operation completed when it was started.
char completed_request;

struct View {
  std::byte* data = nullptr;
  int64_t numel = 0;
  std::size_t element_size = 0;
  DLDataType dtype{};
  std::size_t bytes(int64_t elements) const { return static_cast<std::size_t>(elements) * element_size; }
};

View view_of(const DLTensor* t, const char* what, const std::string& call) {
  const std::string name = call + ": " + what;
  if (t == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, name + " is NULL");
  if (t->device.device_type != kDLCPU)
    throw Error(PLX_ERR_UNSUPPORTED, name + " is not in CPU memory; the local backend copies CPU tensors");
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr))
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                name + " has no valid shape (ndim " + std::to_string(t->ndim) + ")");
  for (int i = 0; i < t->ndim; ++i)
    if (t->shape[i] < 0) throw Error(PLX_ERR_INVALID_ARGUMENT, name + " has a negative dimension");
  if (plx_is_contiguous(t) == 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT, name + " is not contiguous (row-major, compact strides required)");
  const uint64_t bits = static_cast<uint64_t>(t->dtype.bits) * t->dtype.lanes;
  if (bits == 0 || bits % 8 != 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                name + ": dtype " + dtype_name(t->dtype) + " is not a whole number of bytes");
  View v;
  v.data = static_cast<std::byte*>(plx_data(t));
  v.numel = plx_numel(t);
  v.element_size = static_cast<std::size_t>(bits / 8);
  v.dtype = t->dtype;
  if (t->data == nullptr && v.numel > 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT, name + " has " + std::to_string(v.numel) + " elements but no data");
  return v;
}

// The checks every send/recv pair of a collective shares: same dtype, `recv` holding `numel`.
void expect_pair(const View& send, const View& recv, const std::string& call) {
  if (!plx_dtype_equal(send.dtype, recv.dtype))
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send is " + dtype_name(send.dtype) + " but recv is " +
                                              dtype_name(recv.dtype) + " (they must have the same dtype)");
  if (send.numel != recv.numel)
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send has " + std::to_string(send.numel) +
                                              " elements but recv has " + std::to_string(recv.numel) + " (" +
                                              dtype_name(send.dtype) + "; with one rank they must be equal)");
}

void copy(const View& from, int64_t from_offset, const View& to, int64_t to_offset, int64_t count) {
  if (count == 0) return;
  const std::byte* source = from.data + from.bytes(from_offset);
  std::byte* target = to.data + to.bytes(to_offset);
  if (source != target) std::memmove(target, source, to.bytes(count));
}

LocalComm& comm_of(void* comm) {
  if (comm == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "the communicator is NULL");
  return *static_cast<LocalComm*>(comm);
}

void complete(void** out_request) {
  if (out_request != nullptr) *out_request = &completed_request;
}

void check_op(int32_t op, const std::string& call) {
  if (op < PLX_REDUCE_SUM || op > PLX_REDUCE_MIN)
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": op " + std::to_string(op) +
                                              " is not a PLX_REDUCE_* value (0 sum, 1 avg, 2 max, 3 min)");
}

plx_status init(const plx_comm_init_args* args, void** out_world) noexcept {
  return guard("local", [&] {
    if (out_world == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "init: out_world is NULL");
    *out_world = nullptr;
    if (args == nullptr || args->struct_size < PLX_FIELD_END(plx_comm_init_args, device))
      throw Error(PLX_ERR_INVALID_ARGUMENT, "init: args are NULL or older than plx_comm_init_args 1.0");
    if (args->world_size > 1)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "init: the local backend runs one process; this job has " +
                                                std::to_string(args->world_size) + " ranks: use mpi or nccl");
    if (args->rank > 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "init: RANK=" + std::to_string(args->rank) +
                                                " from the launcher, but the local backend has only rank 0");
    if (args->device.device_type != kDLCPU)
      throw Error(PLX_ERR_UNSUPPORTED,
                  "init: the local backend copies CPU tensors; it was asked for device type " +
                      std::to_string(args->device.device_type));
    *out_world = new LocalComm{"world"};
  });
}

void destroy(void* comm) noexcept {
  delete static_cast<LocalComm*>(comm);
}

plx_status rank_size(void* comm, int32_t* rank, int32_t* size) noexcept {
  return guard("local", [&] {
    static_cast<void>(comm_of(comm));
    if (rank != nullptr) *rank = 0;
    if (size != nullptr) *size = 1;
  });
}

plx_status split(void* comm, int32_t color, int32_t /*key*/, void** out_comm) noexcept {
  return guard("local", [&] {
    if (out_comm == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "split: out_comm is NULL");
    *out_comm = nullptr;
    const LocalComm& c = comm_of(comm);
    if (color >= 0) *out_comm = new LocalComm{c.label + "/" + std::to_string(color)};
  });
}

plx_status all_reduce(void* comm, const DLTensor* send, DLTensor* recv, int32_t op, plx_stream,
                      void** out_request) noexcept {
  return guard("local", [&] {
    const std::string call = comm_of(comm).call("all_reduce");
    const View s = view_of(send, "send", call);
    const View r = view_of(recv, "recv", call);
    expect_pair(s, r, call);
    check_op(op, call);
    copy(s, 0, r, 0, s.numel);  // the sum, average, maximum or minimum of one value
    complete(out_request);
  });
}

plx_status all_gather(void* comm, const DLTensor* send, DLTensor* recv, plx_stream,
                      void** out_request) noexcept {
  return guard("local", [&] {
    const std::string call = comm_of(comm).call("all_gather");
    const View s = view_of(send, "send", call);
    const View r = view_of(recv, "recv", call);
    expect_pair(s, r, call);
    copy(s, 0, r, 0, s.numel);
    complete(out_request);
  });
}

plx_status reduce_scatter(void* comm, const DLTensor* send, DLTensor* recv, int32_t op, plx_stream,
                          void** out_request) noexcept {
  return guard("local", [&] {
    const std::string call = comm_of(comm).call("reduce_scatter");
    const View s = view_of(send, "send", call);
    const View r = view_of(recv, "recv", call);
    expect_pair(s, r, call);
    check_op(op, call);
    copy(s, 0, r, 0, s.numel);
    complete(out_request);
  });
}

plx_status all_to_all_v(void* comm, const DLTensor* send, const int64_t* send_counts,
                        const int64_t* send_offsets, DLTensor* recv, const int64_t* recv_counts,
                        const int64_t* recv_offsets, plx_stream, void** out_request) noexcept {
  return guard("local", [&] {
    const std::string call = comm_of(comm).call("all_to_all_v");
    const View s = view_of(send, "send", call);
    const View r = view_of(recv, "recv", call);
    if (!plx_dtype_equal(s.dtype, r.dtype))
      throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send is " + dtype_name(s.dtype) + " but recv is " +
                                                dtype_name(r.dtype) + " (they must have the same dtype)");
    if (send_counts == nullptr || send_offsets == nullptr || recv_counts == nullptr ||
        recv_offsets == nullptr)
      throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": the counts and offsets need one entry each (one rank)");
    const int64_t count = send_counts[0];
    if (count != recv_counts[0])
      throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send_counts[0] = " + std::to_string(count) +
                                                " but recv_counts[0] = " + std::to_string(recv_counts[0]) +
                                                " (with one rank, rank 0 sends to itself)");
    auto check = [&](const View& v, int64_t offset, const char* side) {
      if (count < 0 || offset < 0 || count > v.numel || offset > v.numel - count)
        throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": " + side + "_offsets[0] + " + side +
                                                  "_counts[0] = " + std::to_string(offset) + " + " +
                                                  std::to_string(count) + " is outside " + side + "'s " +
                                                  std::to_string(v.numel) + " elements");
    };
    check(s, send_offsets[0], "send");
    check(r, recv_offsets[0], "recv");
    copy(s, send_offsets[0], r, recv_offsets[0], count);
    complete(out_request);
  });
}

plx_status broadcast(void* comm, DLTensor* buffer, int32_t root, plx_stream, void** out_request) noexcept {
  return guard("local", [&] {
    const std::string call = comm_of(comm).call("broadcast");
    static_cast<void>(view_of(buffer, "buffer", call));
    if (root != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": root " + std::to_string(root) +
                                                " is not a rank of this communicator (its only rank is 0)");
    complete(out_request);
  });
}

[[noreturn]] void no_peer(const LocalComm& c, const char* name, int32_t peer) {
  const std::string call =
      c.call(std::string(name) + (name[0] == 's' ? " to rank " : " from rank ") + std::to_string(peer));
  if (peer == 0)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                call + ": peer 0 is this rank itself; the local backend has one rank and no peer");
  throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": peer " + std::to_string(peer) +
                                            " is not a rank of this communicator (its only rank is 0)");
}

plx_status send(void* comm, const DLTensor*, int32_t peer, int32_t, plx_stream, void**) noexcept {
  return guard("local", [&] { no_peer(comm_of(comm), "send", peer); });
}

plx_status recv(void* comm, DLTensor*, int32_t peer, int32_t, plx_stream, void**) noexcept {
  return guard("local", [&] { no_peer(comm_of(comm), "recv", peer); });
}

plx_status barrier(void* comm) noexcept {
  return guard("local", [&] { static_cast<void>(comm_of(comm)); });
}

plx_status wait(void* comm, void* request, uint32_t) noexcept {
  return guard("local", [&] {
    static_cast<void>(comm_of(comm));
    if (request != &completed_request)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "wait: not a request of the local backend");
  });
}

plx_status test(void* comm, void* request, int32_t* done) noexcept {
  return guard("local", [&] {
    static_cast<void>(comm_of(comm));
    if (request != &completed_request || done == nullptr)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "test: not a request of the local backend, or done is NULL");
    *done = 1;
  });
}

// The job is this process: abort ends it with a non-zero status, as MPI_Abort ends every rank.
plx_status abort(void* /*comm*/, const char* reason) noexcept {
  const std::string line =
      std::string("local: aborting: ") + (reason != nullptr ? reason : "no reason given");
  if (const plx_host_api* host = plexus::sdk::detail::host_slot(); host != nullptr)
    host->log(host->ctx, PLX_LOG_ERROR, line.c_str());
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(nullptr);
  std::_Exit(1);
}

const plx_comm_v1 kTable = {sizeof(plx_comm_v1),
                            0,
                            PLX_DEVICE_BIT(kDLCPU),
                            &init,
                            &destroy,
                            &rank_size,
                            &split,
                            &all_reduce,
                            &all_gather,
                            &reduce_scatter,
                            &all_to_all_v,
                            &broadcast,
                            &send,
                            &recv,
                            &barrier,
                            &wait,
                            &test,
                            &abort};

constexpr const char* kSchema =
    R"({"type": "object", "doc": "The local comm backend has no options.", "properties": {}})";

const plx_component_desc kLocal = {sizeof(plx_component_desc),
                                   PLX_KIND_COMM,
                                   "local",
                                   "a single process (world size 1): collectives are copies",
                                   kSchema,
                                   &kTable};

}  // namespace
}  // namespace plexus::comm_local

PLEXUS_PLUGIN("comm_local", "1.0.0", "Communication for a job of one process", &plexus::comm_local::kLocal)

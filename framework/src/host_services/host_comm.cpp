// Communication for plugins: plx_host_api's group functions, routed to the communicators of
// the distributed runtime (one per process). A plx_group is one of its Communicators; a
// plx_request pairs the backend's request with its communicator. Until the runtime is
// started no group exists and every call says so plainly.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "host_services/host_functions.hpp"
#include "host_services/last_error.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/errors.hpp"

namespace plexus::detail {
namespace {

using distributed::Collective;
using distributed::Communicator;

std::atomic<distributed::Runtime*> g_runtime{nullptr};

constexpr const char* kNoRuntime =
    "no communication group is available: the distributed runtime is not running in this host";

struct HostRequest {
  const Communicator* comm;
  void* handle;
};

const Communicator* comm_of(plx_group group) {
  return reinterpret_cast<const Communicator*>(group);
}

plx_status no_group() {
  return fail(PLX_ERR_UNSUPPORTED, kNoRuntime);
}

// Runs a backend call, counting it (Communicator::traffic) and turning its request into a host
// request when one is asked for.
template <class Call>
plx_status routed(plx_group group, plx_request* out_request, distributed::Collective kind, uint64_t bytes,
                  Call&& call) {
  if (group == nullptr)
    return g_runtime.load() == nullptr ? no_group() : fail(PLX_ERR_INVALID_ARGUMENT, "group is NULL");
  const Communicator* comm = comm_of(group);
  comm->count(kind, bytes);
  void* handle = nullptr;
  const plx_status status = call(comm->table(), comm->handle(), out_request != nullptr ? &handle : nullptr);
  if (status != PLX_OK || out_request == nullptr) return status;
  try {
    *out_request = reinterpret_cast<plx_request>(new HostRequest{comm, handle});
  } catch (...) {
    (void)comm->table().wait(comm->handle(), handle, 0);
    return fail(PLX_ERR_OUT_OF_MEMORY, "out of memory for a communication request");
  }
  return PLX_OK;
}

uint64_t bytes_of(const DLTensor* t) {
  return t != nullptr ? distributed::tensor_bytes(*t) : 0;
}

// The elements an all-to-all sends, in bytes (its counts have one entry per rank of the group).
uint64_t sent_bytes(plx_group g, const DLTensor* send, const int64_t* counts) {
  if (g == nullptr || send == nullptr || counts == nullptr) return 0;
  uint64_t elements = 0;
  for (int32_t r = 0; r < comm_of(g)->size(); ++r) elements += static_cast<uint64_t>(counts[r]);
  return elements * ((static_cast<uint64_t>(send->dtype.bits) * send->dtype.lanes + 7) / 8);
}

plx_status group_get(void*, const char* name, plx_group* out) {
  *out = nullptr;
  const distributed::Runtime* runtime = g_runtime.load();
  const std::string kind = name != nullptr ? name : "";
  if (runtime == nullptr) return fail(PLX_ERR_NOT_FOUND, "group '" + kind + "': " + kNoRuntime);
  // A MIMO module's layers get their module's group of that name first (Runtime::group reads the
  // thread's ModuleGroupScope).
  const Communicator* comm = kind == "world" ? &runtime->world() : runtime->group(kind);
  if (comm == nullptr) {
    std::string kinds = "world";
    for (const std::string& k : runtime->group_kinds()) kinds += ", " + k;
    return fail(PLX_ERR_NOT_FOUND,
                "group '" + kind + "': the topology made no such group (it has: " + kinds + ")");
  }
  *out = reinterpret_cast<plx_group>(const_cast<Communicator*>(comm));
  return PLX_OK;
}

plx_status group_create(void*, const char* name, const int32_t* ranks, const uint32_t* sizes,
                        uint32_t num_groups, plx_group* out) {
  *out = nullptr;
  distributed::Runtime* runtime = g_runtime.load();
  if (runtime == nullptr) return no_group();
  if (name == nullptr || (num_groups > 0 && (ranks == nullptr || sizes == nullptr)))
    return fail(PLX_ERR_INVALID_ARGUMENT, "group_create: name, ranks and sizes must not be NULL");
  try {
    std::vector<std::vector<int32_t>> groups;
    std::size_t at = 0;
    for (uint32_t g = 0; g < num_groups; ++g) {
      groups.emplace_back(ranks + at, ranks + at + sizes[g]);
      at += sizes[g];
    }
    const Communicator* comm = runtime->create_groups(name, groups);
    *out = reinterpret_cast<plx_group>(const_cast<Communicator*>(comm));
    return PLX_OK;
  } catch (const ComponentCallError& e) {
    return fail(static_cast<plx_status>(e.status()), e.what());
  } catch (const std::exception& e) {
    return fail(PLX_ERR_INVALID_ARGUMENT, e.what());
  }
}

plx_status group_rank(void*, plx_group group, int32_t* rank, int32_t* size) {
  if (group == nullptr) return no_group();
  *rank = comm_of(group)->rank();
  *size = comm_of(group)->size();
  return PLX_OK;
}

plx_status all_reduce(void*, plx_group g, const DLTensor* send, DLTensor* recv, int32_t op, plx_stream s,
                      plx_request* r) {
  return routed(g, r, Collective::all_reduce, bytes_of(recv), [&](const plx_comm_v1& t, void* c, void** q) {
    return t.all_reduce(c, send, recv, op, s, q);
  });
}
plx_status all_gather(void*, plx_group g, const DLTensor* send, DLTensor* recv, plx_stream s,
                      plx_request* r) {
  return routed(g, r, Collective::all_gather, bytes_of(recv),
                [&](const plx_comm_v1& t, void* c, void** q) { return t.all_gather(c, send, recv, s, q); });
}
plx_status reduce_scatter(void*, plx_group g, const DLTensor* send, DLTensor* recv, int32_t op, plx_stream s,
                          plx_request* r) {
  return routed(
      g, r, Collective::reduce_scatter, bytes_of(send),
      [&](const plx_comm_v1& t, void* c, void** q) { return t.reduce_scatter(c, send, recv, op, s, q); });
}
plx_status all_to_all_v(void*, plx_group g, const DLTensor* send, const int64_t* send_counts,
                        const int64_t* send_offsets, DLTensor* recv, const int64_t* recv_counts,
                        const int64_t* recv_offsets, plx_stream s, plx_request* r) {
  return routed(g, r, Collective::all_to_all, sent_bytes(g, send, send_counts),
                [&](const plx_comm_v1& t, void* c, void** q) {
                  return t.all_to_all_v(c, send, send_counts, send_offsets, recv, recv_counts, recv_offsets,
                                        s, q);
                });
}
plx_status broadcast(void*, plx_group g, DLTensor* buffer, int32_t root, plx_stream s, plx_request* r) {
  return routed(g, r, Collective::broadcast, bytes_of(buffer),
                [&](const plx_comm_v1& t, void* c, void** q) { return t.broadcast(c, buffer, root, s, q); });
}
plx_status send(void*, plx_group g, const DLTensor* buffer, int32_t peer, int32_t tag, plx_stream s,
                plx_request* r) {
  return routed(g, r, Collective::send, bytes_of(buffer),
                [&](const plx_comm_v1& t, void* c, void** q) { return t.send(c, buffer, peer, tag, s, q); });
}
plx_status recv(void*, plx_group g, DLTensor* buffer, int32_t peer, int32_t tag, plx_stream s,
                plx_request* r) {
  return routed(g, r, Collective::recv, bytes_of(buffer),
                [&](const plx_comm_v1& t, void* c, void** q) { return t.recv(c, buffer, peer, tag, s, q); });
}
plx_status barrier(void*, plx_group g) {
  if (g == nullptr) return no_group();
  return comm_of(g)->table().barrier(comm_of(g)->handle());
}
plx_status request_wait(void*, plx_request request) {
  if (request == nullptr) return fail(PLX_ERR_INVALID_ARGUMENT, "request is NULL");
  const std::unique_ptr<HostRequest> owned(reinterpret_cast<HostRequest*>(request));
  return owned->comm->table().wait(owned->comm->handle(), owned->handle, 0);
}
plx_status request_test(void*, plx_request request, int32_t* done) {
  if (request == nullptr) return fail(PLX_ERR_INVALID_ARGUMENT, "request is NULL");
  const auto* r = reinterpret_cast<HostRequest*>(request);
  return r->comm->table().test(r->comm->handle(), r->handle, done);
}

}  // namespace

void set_comm_runtime(distributed::Runtime* runtime) noexcept {
  g_runtime.store(runtime);
}

void fill_comm_functions(plx_host_api& api) {
  api.group_get = &group_get;
  api.group_rank = &group_rank;
  api.all_reduce = &all_reduce;
  api.all_gather = &all_gather;
  api.reduce_scatter = &reduce_scatter;
  api.all_to_all_v = &all_to_all_v;
  api.broadcast = &broadcast;
  api.send = &send;
  api.recv = &recv;
  api.barrier = &barrier;
  api.request_wait = &request_wait;
  api.request_test = &request_test;
  api.group_create = &group_create;
}

}  // namespace plexus::detail

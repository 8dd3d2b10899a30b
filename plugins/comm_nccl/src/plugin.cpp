// The comm_nccl plugin: one comm backend, "nccl", for CUDA GPUs (plx_comm_v1, plexus/comm.h). This
// file is the C boundary: every table function runs inside plexus::sdk::guard, turns the call's
// plx_stream into a cudaStream_t through the host, and hands the work to a Communicator
// (communicator.hpp); init forms the world (world.hpp).
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "communicator.hpp"
#include "mpi_bootstrap.hpp"
#include "plexus/comm.h"
#include "plexus/cpp/plugin.hpp"
#include "world.hpp"

namespace plexus::comm_nccl {
namespace {

using plexus::sdk::guard;

// The exit status of a process ended by abort (comm.h: "ends every rank of the job, non-zero").
constexpr int kAbortExitCode = 1;

constexpr const char* kSchema =
    R"({"type": "object",)"
    R"( "doc": "The NCCL comm backend: collectives and point-to-point transfers of CUDA memory.",)"
    R"( "properties": {)"
    R"(  "bootstrap": {"type": "string", "enum": ["auto", "tcp", "mpi"], "default": "auto",)"
    R"(   "doc": "How rank 0's NCCL unique id reaches the other ranks: 'mpi' (MPI_Bcast), 'tcp')"
    R"( (MASTER_ADDR and MASTER_PORT), or 'auto': MPI under mpirun when this plugin was built)"
    R"( with MPI, TCP otherwise."},)"
    R"(  "init_timeout_ms": {"type": "integer", "minimum": 0, "maximum": 4294967295, "default": 0,)"
    R"(   "doc": "Limit for forming the world (bootstrap and ncclCommInitRank); 0: the)"
    R"( communicator's timeout, or 600000 when it has none."}}})";

Communicator& comm_of(void* comm) {
  if (comm == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null communicator");
  return *static_cast<Communicator*>(comm);
}

Request& request_of(void* request) {
  if (request == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null request");
  return *static_cast<Request*>(request);
}

// The call's cudaStream_t: the host knows what a plx_stream wraps (NULL: the default stream).
cudaStream_t native_stream(plx_stream stream) {
  return static_cast<cudaStream_t>(plexus::sdk::Host::current().stream_native(stream));
}

// out_request NULL: the call is blocking (bounded by the communicator's timeout).
void finish(Communicator& comm, Request* request, void** out_request) {
  if (out_request != nullptr) {
    *out_request = request;
    return;
  }
  comm.wait(request, 0);
}

WorldOptions read_options(plx_config config) {
  WorldOptions options;
  if (config == nullptr) return options;
  const plexus::sdk::Host host = plexus::sdk::Host::current();
  const plx_host_api* api = host.api();
  const char* text = nullptr;
  const plx_status status = api->config_get_string(api->ctx, config, "bootstrap", &text);
  if (status == PLX_OK)
    options.bootstrap = text;
  else if (status != PLX_ERR_NOT_FOUND)
    plexus::sdk::check_host(status);
  if (options.bootstrap != "auto" && options.bootstrap != "tcp" && options.bootstrap != "mpi")
    throw Error(PLX_ERR_INVALID_ARGUMENT, host.config_path(config) + ".bootstrap: '" + options.bootstrap +
                                              "' is not one of 'auto', 'tcp', 'mpi'");
  if (const std::optional<int64_t> ms = host.config_int_if(config, "init_timeout_ms")) {
    if (*ms < 0 || *ms > std::numeric_limits<uint32_t>::max())
      throw Error(PLX_ERR_INVALID_ARGUMENT, host.config_path(config) + ".init_timeout_ms: " +
                                                std::to_string(*ms) + " is outside 0..4294967295");
    options.init_timeout_ms = static_cast<uint32_t>(*ms);
  }
  return options;
}

// ---- the table ----

plx_status init(const plx_comm_init_args* args, void** out_world) noexcept {
  return guard("init", [&] {
    if (args == nullptr || out_world == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null arguments");
    if (args->struct_size < PLX_FIELD_END(plx_comm_init_args, device))
      throw Error(PLX_ERR_VERSION, "plx_comm_init_args of " + std::to_string(args->struct_size) +
                                       " bytes lacks the device field");
    plx_comm_init_args a{};  // fields beyond the caller's struct_size stay zero (config: none)
    std::memcpy(&a, args, std::min<std::size_t>(args->struct_size, sizeof(a)));
    *out_world = create_world(a, read_options(a.config)).release();
  });
}

void destroy(void* comm) noexcept {
  delete static_cast<Communicator*>(comm);
}

plx_status rank_size(void* comm, int32_t* rank, int32_t* size) noexcept {
  return guard("rank_size", [&] {
    const Communicator& c = comm_of(comm);
    if (rank != nullptr) *rank = c.rank();
    if (size != nullptr) *size = c.size();
  });
}

plx_status split(void* comm, int32_t color, int32_t key, void** out_comm) noexcept {
  return guard("split", [&] {
    if (out_comm == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null out_comm");
    *out_comm = nullptr;
    *out_comm = comm_of(comm).split(color, key).release();
  });
}

plx_status all_reduce(void* comm, const DLTensor* send, DLTensor* recv, int32_t op, plx_stream stream,
                      void** out_request) noexcept {
  return guard("all_reduce", [&] {
    Communicator& c = comm_of(comm);
    finish(c, c.all_reduce(send, recv, op, native_stream(stream)), out_request);
  });
}

plx_status all_gather(void* comm, const DLTensor* send, DLTensor* recv, plx_stream stream,
                      void** out_request) noexcept {
  return guard("all_gather", [&] {
    Communicator& c = comm_of(comm);
    finish(c, c.all_gather(send, recv, native_stream(stream)), out_request);
  });
}

plx_status reduce_scatter(void* comm, const DLTensor* send, DLTensor* recv, int32_t op, plx_stream stream,
                          void** out_request) noexcept {
  return guard("reduce_scatter", [&] {
    Communicator& c = comm_of(comm);
    finish(c, c.reduce_scatter(send, recv, op, native_stream(stream)), out_request);
  });
}

plx_status all_to_all_v(void* comm, const DLTensor* send, const int64_t* send_counts,
                        const int64_t* send_offsets, DLTensor* recv, const int64_t* recv_counts,
                        const int64_t* recv_offsets, plx_stream stream, void** out_request) noexcept {
  return guard("all_to_all_v", [&] {
    Communicator& c = comm_of(comm);
    finish(c,
           c.all_to_all_v(send, send_counts, send_offsets, recv, recv_counts, recv_offsets,
                          native_stream(stream)),
           out_request);
  });
}

plx_status broadcast(void* comm, DLTensor* buffer, int32_t root, plx_stream stream,
                     void** out_request) noexcept {
  return guard("broadcast", [&] {
    Communicator& c = comm_of(comm);
    finish(c, c.broadcast(buffer, root, native_stream(stream)), out_request);
  });
}

// NCCL has no tags: transfers between two ranks match in the order they are issued.
plx_status send(void* comm, const DLTensor* buffer, int32_t peer, int32_t /*tag*/, plx_stream stream,
                void** out_request) noexcept {
  return guard("send", [&] {
    Communicator& c = comm_of(comm);
    finish(c, c.send(buffer, peer, native_stream(stream)), out_request);
  });
}

plx_status recv(void* comm, DLTensor* buffer, int32_t peer, int32_t /*tag*/, plx_stream stream,
                void** out_request) noexcept {
  return guard("recv", [&] {
    Communicator& c = comm_of(comm);
    finish(c, c.recv(buffer, peer, native_stream(stream)), out_request);
  });
}

plx_status barrier(void* comm) noexcept {
  return guard("barrier", [&] { comm_of(comm).barrier(); });
}

plx_status wait(void* /*comm*/, void* request, uint32_t timeout_ms) noexcept {
  return guard("wait", [&] {
    Request& r = request_of(request);
    r.comm->wait(&r, timeout_ms);
  });
}

plx_status test(void* /*comm*/, void* request, int32_t* done) noexcept {
  return guard("test", [&] {
    if (done == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null done");
    Request& r = request_of(request);
    *done = r.comm->test(&r) ? 1 : 0;
  });
}

// Ends the job: aborts every NCCL communicator of this process (which also makes the peers' NCCL
// calls fail instead of waiting for this rank), then MPI_Abort when MPI is running (it ends every
// rank at once), otherwise this process exits with kAbortExitCode and the launcher ends the rest.
plx_status abort(void* /*comm*/, const char* reason) noexcept {
  const std::string why = reason != nullptr && reason[0] != '\0' ? reason : "no reason given";
  try {
    plexus::sdk::Host::current().log(PLX_LOG_ERROR, "nccl: aborting the job: " + why);
  } catch (...) {
  }
  abort_all(why);
  std::fflush(nullptr);
  mpi_abort_job(kAbortExitCode);
  std::_Exit(kAbortExitCode);
}

const plx_comm_v1 kTable = {sizeof(plx_comm_v1),
                            0,
                            PLX_DEVICE_BIT(kDLCUDA),
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

const plx_component_desc kComponent = {
    sizeof(plx_component_desc),
    PLX_KIND_COMM,
    "nccl",
    "NCCL collectives and point-to-point over CUDA GPUs; bootstrap by MPI or TCP",
    kSchema,
    &kTable};

// libnccl keeps threads of its own (rank 0's bootstrap root, for one, outlives a failed init):
// unloading its code under them would crash the process, so it stays loaded once this plugin is.
void on_load(plexus::sdk::Host) {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) != 0 && info.dli_fname != nullptr)
    static_cast<void>(::dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE));
}

// MPI, when this plugin started it, ends with the plugin (communicators are destroyed before).
void on_unload() noexcept {
  mpi_finalize_if_ours();
}

}  // namespace
}  // namespace plexus::comm_nccl

// The entry spelled out rather than PLEXUS_PLUGIN_WITH_INIT: this plugin also needs a shutdown hook.
PLX_PLUGIN_ENTRY(host, out) {
  static const plx_component_desc* const components[] = {&plexus::comm_nccl::kComponent};
  static plx_plugin_descriptor descriptor = {sizeof(plx_plugin_descriptor),
                                             PLX_ABI_VERSION,
                                             0,
                                             1,
                                             "comm_nccl",
                                             "1.0.0",
                                             "NCCL communication backend for CUDA GPUs",
                                             components,
                                             &plexus::sdk::detail::plugin_init<&plexus::comm_nccl::on_load>,
                                             &plexus::comm_nccl::on_unload};
  return plexus::sdk::detail::plugin_entry(host, out, descriptor);
}

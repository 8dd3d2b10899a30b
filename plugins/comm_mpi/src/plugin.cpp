// The comm_mpi plugin: one comm component, "mpi", for CPU tensors over MPI. This file is the
// boundary: the plx_comm_v1 table, each function behind the exception barrier, requests as
// heap handles that `wait` releases, and init, split, destroy and abort. The operations are in
// ops.cpp, the worker thread and the timeout diagnosis in communicator.cpp, MPI's process-wide
// state in runtime.cpp.
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "communicator.hpp"
#include "ops.hpp"
#include "plexus/comm.h"
#include "plexus/cpp/plugin.hpp"
#include "runtime.hpp"

namespace plexus::comm_mpi {
namespace {

using plexus::sdk::Error;
using plexus::sdk::guard;

// MPI counts are int; larger transfers of all_reduce, broadcast, send and recv go in pieces.
constexpr int64_t kDefaultChunkElements = int64_t{1} << 30;

constexpr const char* kSchema = R"({
  "type": "object",
  "doc": "The mpi comm backend (CPU tensors over MPI; start the ranks with mpirun or srun).",
  "properties": {
    "chunk_elements": {"type": "integer", "minimum": 1, "maximum": 2147483647, "default": 1073741824,
                       "doc": "the most elements one MPI call of all_reduce, broadcast, send or recv moves; larger tensors go in pieces"}
  }
})";

// What out_request points to: the operation, and the communicator it must be waited on.
struct Request {
  std::shared_ptr<Operation> op;
  const Communicator* comm = nullptr;
};

Communicator& comm_of(void* comm) {
  if (comm == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "the communicator is NULL");
  return *static_cast<Communicator*>(comm);
}

// Hands the started operation to the caller, or (out_request NULL) waits for it with the
// communicator's timeout.
void hand_over(Communicator& comm, std::shared_ptr<Operation> op, void** out_request) {
  if (out_request != nullptr) {
    *out_request = new Request{std::move(op), &comm};
    return;
  }
  comm.wait(*op, 0);
}

void clear(void** out_request) {
  if (out_request != nullptr) *out_request = nullptr;
}

plx_status init(const plx_comm_init_args* args, void** out_world) noexcept {
  return guard("mpi", [&] {
    if (out_world == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "init: out_world is NULL");
    *out_world = nullptr;
    if (args == nullptr || args->struct_size < PLX_FIELD_END(plx_comm_init_args, device))
      throw Error(PLX_ERR_INVALID_ARGUMENT, "init: args are NULL or older than plx_comm_init_args 1.0");
    if (args->device.device_type != kDLCPU)
      throw Error(PLX_ERR_UNSUPPORTED,
                  "init: the mpi backend communicates CPU tensors; it was asked for device type " +
                      std::to_string(args->device.device_type) + " (use nccl for GPU memory)");
    int64_t chunk = kDefaultChunkElements;
    if (PLX_HAS_FIELD(args, plx_comm_init_args, config) && args->config != nullptr) {
      if (auto value = plexus::sdk::Host::current().config_int_if(args->config, "chunk_elements"))
        chunk = *value;
      if (chunk < 1 || chunk > INT32_MAX)
        throw Error(PLX_ERR_INVALID_ARGUMENT,
                    "init: chunk_elements must be in 1..2147483647, got " + std::to_string(chunk));
    }

    auto runtime = Runtime::acquire();
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (args->world_size >= 0 && args->world_size != size)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "init: WORLD_SIZE=" + std::to_string(args->world_size) +
                                                " from the launcher but MPI sees " + std::to_string(size) +
                                                (size == 1 ? " process" : " processes") +
                                                ": comm_mpi needs the ranks started by mpirun or srun");
    if (args->rank >= 0 && args->rank != rank)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "init: RANK=" + std::to_string(args->rank) +
                                                " from the launcher but MPI says this process is rank " +
                                                std::to_string(rank) + " of " + std::to_string(size) +
                                                " (the launcher and MPI must number the ranks alike)");
    MPI_Comm world = MPI_COMM_NULL;
    MPI_Comm probe = MPI_COMM_NULL;
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world), "init: MPI_Comm_dup");
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &probe), "init: MPI_Comm_dup");
    auto comm = std::make_unique<Communicator>(runtime, world, probe, "world", args->timeout_ms, chunk);
    const auto host = plexus::sdk::Host::current();
    if (host.logs(PLX_LOG_DEBUG))
      host.log(PLX_LOG_DEBUG, "mpi: rank " + std::to_string(rank) + " of " + std::to_string(size) + ", " +
                                  runtime->library() + ", MPI_THREAD_MULTIPLE, timeout " +
                                  std::to_string(args->timeout_ms) + " ms");
    *out_world = comm.release();
  });
}

void destroy(void* comm) noexcept {
  if (comm == nullptr) return;
  static_cast<void>(guard("mpi", [&] {
    std::unique_ptr<Communicator> owned(static_cast<Communicator*>(comm));
    if (owned->label() == "world" && owned->runtime()->live_communicators.load() > 1)
      plexus::sdk::Host::current().warn(
          "mpi: the world communicator is destroyed before " +
          std::to_string(owned->runtime()->live_communicators.load() - 1) +
          " sub-communicator(s); MPI is finalized only once the last of them is destroyed");
  }));
}

plx_status rank_size(void* comm, int32_t* rank, int32_t* size) noexcept {
  return guard("mpi", [&] {
    const Communicator& c = comm_of(comm);
    if (rank != nullptr) *rank = c.rank();
    if (size != nullptr) *size = c.size();
  });
}

plx_status split(void* comm, int32_t color, int32_t key, void** out_comm) noexcept {
  return guard("mpi", [&] {
    if (out_comm == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "split: out_comm is NULL");
    *out_comm = nullptr;
    Communicator& c = comm_of(comm);
    auto result = std::make_shared<ops::SplitResult>();
    auto op = ops::split(c, color, key, result);
    c.wait(*op, 0);
    if (result->comm == MPI_COMM_NULL) return;  // color < 0: in no new communicator
    *out_comm = new Communicator(c.runtime(), result->comm, result->probe_comm,
                                 c.label() + "/" + std::to_string(color), c.timeout_ms(), c.chunk_elements());
  });
}

plx_status all_reduce(void* comm, const DLTensor* send, DLTensor* recv, int32_t op, plx_stream,
                      void** out_request) noexcept {
  clear(out_request);
  return guard("mpi", [&] {
    Communicator& c = comm_of(comm);
    hand_over(c, ops::all_reduce(c, send, recv, op), out_request);
  });
}

plx_status all_gather(void* comm, const DLTensor* send, DLTensor* recv, plx_stream,
                      void** out_request) noexcept {
  clear(out_request);
  return guard("mpi", [&] {
    Communicator& c = comm_of(comm);
    hand_over(c, ops::all_gather(c, send, recv), out_request);
  });
}

plx_status reduce_scatter(void* comm, const DLTensor* send, DLTensor* recv, int32_t op, plx_stream,
                          void** out_request) noexcept {
  clear(out_request);
  return guard("mpi", [&] {
    Communicator& c = comm_of(comm);
    hand_over(c, ops::reduce_scatter(c, send, recv, op), out_request);
  });
}

plx_status all_to_all_v(void* comm, const DLTensor* send, const int64_t* send_counts,
                        const int64_t* send_offsets, DLTensor* recv, const int64_t* recv_counts,
                        const int64_t* recv_offsets, plx_stream, void** out_request) noexcept {
  clear(out_request);
  return guard("mpi", [&] {
    Communicator& c = comm_of(comm);
    hand_over(c, ops::all_to_all_v(c, send, send_counts, send_offsets, recv, recv_counts, recv_offsets),
              out_request);
  });
}

plx_status broadcast(void* comm, DLTensor* buffer, int32_t root, plx_stream, void** out_request) noexcept {
  clear(out_request);
  return guard("mpi", [&] {
    Communicator& c = comm_of(comm);
    hand_over(c, ops::broadcast(c, buffer, root), out_request);
  });
}

plx_status send(void* comm, const DLTensor* buffer, int32_t peer, int32_t tag, plx_stream,
                void** out_request) noexcept {
  clear(out_request);
  return guard("mpi", [&] {
    Communicator& c = comm_of(comm);
    hand_over(c, ops::send(c, buffer, peer, tag), out_request);
  });
}

plx_status recv(void* comm, DLTensor* buffer, int32_t peer, int32_t tag, plx_stream,
                void** out_request) noexcept {
  clear(out_request);
  return guard("mpi", [&] {
    Communicator& c = comm_of(comm);
    hand_over(c, ops::recv(c, buffer, peer, tag), out_request);
  });
}

plx_status barrier(void* comm) noexcept {
  return guard("mpi", [&] {
    Communicator& c = comm_of(comm);
    hand_over(c, ops::barrier(c), nullptr);
  });
}

plx_status wait(void* comm, void* request, uint32_t timeout_ms) noexcept {
  return guard("mpi", [&] {
    if (request == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "wait: the request is NULL");
    std::unique_ptr<Request> owned(static_cast<Request*>(request));  // released whatever the outcome
    Communicator& c = comm_of(comm);
    if (owned->comm != &c)
      throw Error(
          PLX_ERR_INVALID_ARGUMENT,
          "wait: " + owned->op->title + " belongs to another communicator than (" + c.context() + ")");
    c.wait(*owned->op, timeout_ms);
  });
}

plx_status test(void* comm, void* request, int32_t* done) noexcept {
  return guard("mpi", [&] {
    if (request == nullptr || done == nullptr)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "test: the request or done is NULL");
    static_cast<void>(comm_of(comm));
    *done = static_cast<Request*>(request)->op->is_done() ? 1 : 0;
  });
}

plx_status abort(void* comm, const char* reason) noexcept {
  int rank = -1;
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized != 0 && finalized == 0) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string where =
      comm != nullptr ? " (" + static_cast<Communicator*>(comm)->context() + ")" : std::string();
  const std::string line = "mpi: rank " + std::to_string(rank) + " aborts the job" + where + ": " +
                           (reason != nullptr ? reason : "no reason given");
  if (const plx_host_api* host = plexus::sdk::detail::host_slot(); host != nullptr)
    host->log(host->ctx, PLX_LOG_ERROR, line.c_str());
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(nullptr);  // what this rank printed before is not lost with it
  if (initialized != 0 && finalized == 0) MPI_Abort(MPI_COMM_WORLD, 1);  // ends every rank; does not return
  return guard("mpi", [] { throw Error(PLX_ERR_COMM, "abort: MPI is not running in this process"); });
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

const plx_component_desc kMpi = {sizeof(plx_component_desc),
                                 PLX_KIND_COMM,
                                 "mpi",
                                 "CPU tensors over MPI (mpirun/srun); asynchronous with a progress thread; "
                                 "timeouts name the ranks that did not take part",
                                 kSchema,
                                 &kTable};

}  // namespace
}  // namespace plexus::comm_mpi

PLEXUS_PLUGIN("comm_mpi", "1.0.0", "Communication over MPI for CPU tensors", &plexus::comm_mpi::kMpi)

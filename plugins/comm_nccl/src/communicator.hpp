// One NCCL communicator (the world or a split of it) and its requests.
//
// Every communicator is nonblocking (ncclConfig_t.blocking = 0): NCCL calls return at once, and
// this class polls their state, so that init, split, enqueueing and waiting all honour a deadline
// instead of hanging inside NCCL. An operation is enqueued on the caller's stream and followed by
// a CUDA event; the request is that event. Waiting polls the event and the communicator's
// asynchronous error; past the limit the communicator is aborted (ncclCommAbort, which also
// releases the GPU kernels stuck in it) and the error names the operation, the communicator, the
// time and the ranks that may be missing. NCCL does not say which peer failed to take part, so the
// message lists every other rank of the communicator and says so.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plexus/tensor.h"
#include "support.hpp"

namespace plexus::comm_nccl {

class Communicator;

// A started operation: the event recorded after it on its stream.
struct Request {
  Communicator* comm = nullptr;
  cudaEvent_t event = nullptr;
  const char* op = "";
  Clock::time_point started;
};

class Communicator {
 public:
  // The world communicator: ncclCommInitRankConfig with rank 0's unique id, within `deadline`.
  static std::unique_ptr<Communicator> create_world(const ncclUniqueId& id, int32_t rank, int32_t size,
                                                    int device, uint32_t timeout_ms,
                                                    const Deadline& deadline);
  // Finalizes and destroys the NCCL communicator (aborts it when it failed or finalizing does not
  // finish within the timeout, or 60 s without one); releases events, stream and scratch.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int32_t rank() const noexcept { return rank_; }
  int32_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  const std::string& name() const noexcept { return name_; }

  // Collective over this communicator: ncclCommSplit. nullptr for color < 0.
  std::unique_ptr<Communicator> split(int32_t color, int32_t key);

  // Each enqueues on `stream` (nullptr: the legacy default stream) and returns a request that
  // wait() completes and releases.
  Request* all_reduce(const DLTensor* send, DLTensor* recv, int32_t op, cudaStream_t stream);
  Request* all_gather(const DLTensor* send, DLTensor* recv, cudaStream_t stream);
  Request* reduce_scatter(const DLTensor* send, DLTensor* recv, int32_t op, cudaStream_t stream);
  Request* all_to_all_v(const DLTensor* send, const int64_t* send_counts, const int64_t* send_offsets,
                        DLTensor* recv, const int64_t* recv_counts, const int64_t* recv_offsets,
                        cudaStream_t stream);
  Request* broadcast(DLTensor* buffer, int32_t root, cudaStream_t stream);
  Request* send(const DLTensor* buffer, int32_t peer, cudaStream_t stream);
  Request* recv(DLTensor* buffer, int32_t peer, cudaStream_t stream);
  // A one-element all_reduce on the communicator's own stream, waited for: every rank got here.
  void barrier();

  // Completes and releases `request` (also when it throws). timeout_ms 0: this communicator's
  // timeout. Throws PLX_ERR_TIMEOUT past it, PLX_ERR_COMM on an NCCL failure.
  void wait(Request* request, uint32_t timeout_ms);
  bool test(Request* request);

  // ncclCommAbort, once; later calls refuse with `reason`. For the job-wide abort, which may come
  // from another thread while this one is in use: it waits at most ~1 s for the lock.
  void abort_nccl(const std::string& reason) noexcept;

 private:
  Communicator(ncclComm_t comm, int device, int32_t rank, int32_t size, uint32_t timeout_ms, std::string name,
               std::vector<int32_t> members);

  // The communicator's own stream and barrier scratch; separate from the constructor so that a
  // failure here still runs the destructor (which then aborts the NCCL communicator).
  void prepare();
  // Enqueues `body` (returns an ncclResult_t) under the lock, waits out NCCL's nonblocking state,
  // records the request's event on `stream`.
  template <class Body>
  Request* start(const char* op, cudaStream_t stream, Body&& body);
  // Waits until NCCL finished the call that returned `result` on `comm` (ncclInProgress), or
  // throws: its error, or a timeout past `deadline` (the communicator is then aborted).
  void settle(ncclComm_t comm, ncclResult_t result, const char* op, const Deadline& deadline);
  // Throws PLX_ERR_COMM when NCCL reported an asynchronous error (aborting the communicator).
  void check_async(const char* op);
  void expect_usable(const char* op) const;
  // Aborts the communicator and throws PLX_ERR_TIMEOUT naming `op`, the limit, the time waited (and
  // since the operation started, when started_s > 0) and the ranks that may be missing.
  [[noreturn]] void timed_out(const char* op, uint64_t limit_ms, double waited_s, double started_s);
  [[noreturn]] void failed(const char* op, ncclResult_t result);
  std::string describe() const;       // "NCCL communicator 'world' (rank 1 of 4 on cuda:1)"
  std::string missing_ranks() const;  // who may not have taken part, in world ranks
  cudaEvent_t take_event();
  void give_back(cudaEvent_t event) noexcept;
  std::vector<int32_t> gather_world_ranks(int32_t my_world_rank);

  ncclComm_t comm_;
  int device_;
  int32_t rank_;
  int32_t size_;
  uint32_t timeout_ms_;
  std::string name_;
  std::vector<int32_t> members_;   // the world rank of each rank of this communicator
  cudaStream_t stream_ = nullptr;  // the communicator's own (barrier, split bookkeeping)
  void* scratch_ = nullptr;        // one float for barrier
  mutable std::mutex mutex_;
  std::atomic<bool> broken_{false};
  std::string broken_reason_;  // set with broken_, under mutex_
  std::vector<cudaEvent_t> free_events_;
};

// Aborts every live communicator of this process (the job-wide abort).
void abort_all(const std::string& reason) noexcept;

}  // namespace plexus::comm_nccl

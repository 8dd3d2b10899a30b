// A communicator of the mpi backend: an MPI communicator, a worker thread that runs its
// operations, and a side channel on which the worker answers liveness probes.
//
// Why a worker thread: Open MPI advances a non-blocking collective only while some thread is
// inside an MPI call. A scheduler that starts an all-reduce and then computes would get no
// overlap at all if progress waited for its `wait`. Each communicator therefore owns one thread
// that starts the operations callers submit, in submission order (so every rank posts its
// collectives in the same order), and polls MPI until they complete; callers block on a
// condition variable, never inside MPI. Sub-communicators have their own worker, so a slow
// group does not delay another.
//
// Why a side channel: when a wait times out, the caller must say which ranks did not take part.
// Every communicator keeps the number of collectives its rank has reached; the worker, each time
// it polls, answers probes arriving on a duplicate of the communicator (its own tags, never
// seen by user traffic) with that number. The waiting thread probes every peer and gives them a
// grace period: a peer that does not answer is stopped, dead or unreachable; a peer whose number
// is below the collective's has not reached it yet.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "operation.hpp"
#include "runtime.hpp"

namespace plexus::comm_mpi {

class Communicator {
 public:
  // Takes ownership of `comm` and of its duplicate `probe_comm`.
  Communicator(std::shared_ptr<Runtime> runtime, MPI_Comm comm, MPI_Comm probe_comm, std::string label,
               uint32_t timeout_ms, int64_t chunk_elements);
  // Lets the operations already submitted finish (for at most the timeout when there is one),
  // stops the worker and frees the MPI communicators.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int32_t rank() const noexcept { return rank_; }
  int32_t size() const noexcept { return size_; }
  const std::string& label() const noexcept { return label_; }
  uint32_t timeout_ms() const noexcept { return timeout_ms_; }
  int64_t chunk_elements() const noexcept { return chunk_elements_; }
  const std::shared_ptr<Runtime>& runtime() const noexcept { return runtime_; }
  MPI_Comm mpi_comm() const noexcept { return comm_; }

  // "world, 2 ranks": which communicator, for messages.
  std::string context() const;
  // "rank 1", or on a sub-communicator "rank 1 (world rank 3)".
  std::string rank_name(int32_t rank) const;
  // "rank 1" / "ranks 1, 3", with world ranks on a sub-communicator.
  std::string ranks_text(const std::vector<int32_t>& ranks) const;

  // Numbers the operation (collectives), queues it for the worker and returns it. Throws
  // Error(PLX_ERR_COMM) once the communicator is unusable.
  std::shared_ptr<Operation> submit(std::shared_ptr<Operation> op);
  // Blocks until the operation completes; throws its error. timeout_ms 0 means the
  // communicator's timeout (0 there: none). Past it, probes the peers, makes the communicator
  // unusable and throws Error(PLX_ERR_TIMEOUT) naming the ranks that did not take part.
  void wait(Operation& op, uint32_t timeout_ms);

 private:
  struct PendingSend {  // a probe or a probe's answer on its way; owns its buffer
    MPI_Request request = MPI_REQUEST_NULL;
    std::unique_ptr<std::array<int64_t, 3>> buffer;
  };

  void worker_loop();
  void start(Operation& op);
  bool progress(std::deque<std::shared_ptr<Operation>>& in_flight);
  void answer_probes();
  void reap_sends(bool give_up);
  std::string diagnose(const Operation& op, std::chrono::milliseconds grace);
  void make_unusable(const std::string& reason);

  std::shared_ptr<Runtime> runtime_;
  MPI_Comm comm_;
  MPI_Comm probe_comm_;
  std::string label_;
  uint32_t timeout_ms_;
  int64_t chunk_elements_;
  int32_t rank_ = 0;
  int32_t size_ = 0;
  std::vector<int32_t> world_ranks_;  // empty on the world itself

  // Counters the probes report: collectives reached (submitted) and completed on this rank.
  std::atomic<int64_t> reached_{0};
  std::atomic<int64_t> completed_{0};

  std::mutex mutex_;  // guards the queue, the stop request, the unusable reason, orphans_, waiters_
  std::condition_variable wake_;
  // Threads blocked in wait: while there are any the worker pauses at most kMinPause between
  // polls, so a completion is seen at once and not after a long pause.
  int waiters_ = 0;
  std::deque<std::shared_ptr<Operation>> queue_;
  bool stop_ = false;
  std::string unusable_;
  std::vector<PendingSend> orphans_;  // probe sends a waiting thread left behind

  std::mutex probe_mutex_;  // one probe round at a time
  int64_t probe_round_ = 0;

  std::vector<PendingSend> sends_;  // the worker's: answers to probes, adopted orphans
  bool leaked_ = false;             // set by the worker when it gave up on MPI requests
  std::thread worker_;
};

}  // namespace plexus::comm_mpi

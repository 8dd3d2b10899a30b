// The process's MPI library, shared by every communicator of this plugin.
//
// MPI may be initialized once per process and finalized once. The first world communicator
// initializes it (MPI_Init_thread with MPI_THREAD_MULTIPLE: each communicator's worker thread and
// the threads waiting on its requests call MPI concurrently); every communicator holds the
// Runtime, so MPI_Finalize runs when the last one is destroyed, and only if this plugin was the
// one that initialized MPI.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace plexus::comm_mpi {

class Runtime {
 public:
  // The running MPI, initialized on first use. Throws Error when MPI cannot be initialized (or was
  // already finalized) or lacks MPI_THREAD_MULTIPLE.
  static std::shared_ptr<Runtime> acquire();
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // A communicator gave up on MPI requests still in flight (a peer stopped or died): MPI_Finalize
  // could block on them forever, so it is skipped. The host is expected to call abort.
  void leave_unfinalized() noexcept { unclean_ = true; }

  // Communicators alive, so the world can tell when it is destroyed before its sub-communicators.
  std::atomic<int> live_communicators{0};

  int tag_ub() const noexcept { return tag_ub_; }
  const std::string& library() const noexcept { return library_; }

  // An MPI datatype of `bytes` bytes, for moving elements of any dtype without reducing them.
  MPI_Datatype element_type(std::size_t bytes);
  // The user-defined reductions over bfloat16 (PLX_REDUCE_SUM/AVG, MAX, MIN).
  MPI_Op bf16_op(int32_t reduce) const noexcept;

 private:
  explicit Runtime(bool initialized_here);

  bool initialized_here_;
  std::atomic<bool> unclean_{false};
  int tag_ub_ = 32767;  // the least MPI guarantees
  std::string library_;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Op bf16_max_ = MPI_OP_NULL;
  MPI_Op bf16_min_ = MPI_OP_NULL;
  std::mutex types_mutex_;
  std::map<std::size_t, MPI_Datatype> types_;  // committed here, freed before MPI_Finalize
};

// MPI's own text for an error code.
std::string mpi_error_text(int code);
// Throws Error(PLX_ERR_COMM, "<what>: <MPI's text>") unless `code` is MPI_SUCCESS.
void check_mpi(int code, const std::string& what);

}  // namespace plexus::comm_mpi

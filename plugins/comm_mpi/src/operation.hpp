// One communication call: what it is (for messages), how it is started on MPI, what happens
// once MPI completes it, and its completion state, shared by the communicator's worker thread
// (which runs it) and the caller (which waits for it).
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "plexus/abi.h"

namespace plexus::comm_mpi {

using Clock = std::chrono::steady_clock;

struct Operation {
  std::string name;        // "all_reduce", "send", ...
  bool collective = true;  // false: point-to-point with `peer`
  int32_t peer = -1;
  int32_t tag = 0;
  uint64_t seq = 0;   // collectives: its number on the communicator, from 1
  std::string title;  // "all_reduce #57 (world, 2 ranks)", set when submitted

  // Run on the worker thread, in submission order: `start` posts the non-blocking MPI calls and
  // appends their requests; `finish` (optional) runs after MPI completed them all (the division
  // of an average, the second half of a split) and may throw Error.
  std::function<void(MPI_Comm comm, std::vector<MPI_Request>& requests)> start;
  std::function<void()> finish;
  std::vector<MPI_Request> requests;  // the worker's only
  std::vector<MPI_Status> statuses;   // filled when they complete (finish may read them)

  // Completion, under `mutex`.
  std::mutex mutex;
  std::condition_variable completed;
  bool done = false;
  plx_status status = PLX_OK;
  std::string error;

  void complete(plx_status result, std::string message) {
    {
      std::lock_guard lock(mutex);
      done = true;
      status = result;
      error = std::move(message);
    }
    completed.notify_all();
  }
  // True when done before `deadline` (none: waits for ever).
  bool wait_until(std::optional<Clock::time_point> deadline) {
    std::unique_lock lock(mutex);
    if (!deadline) {
      completed.wait(lock, [&] { return done; });
      return true;
    }
    return completed.wait_until(lock, *deadline, [&] { return done; });
  }
  bool is_done() {
    std::lock_guard lock(mutex);
    return done;
  }
};

}  // namespace plexus::comm_mpi

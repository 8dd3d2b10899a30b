// Fits the OpenMP team to the cores the process actually gets, step by step.
//
// Beside another busy process, a team of as many threads as cores loses most of its speed: a loop
// ends only when its last thread does, and one of them is always waiting for a core the other
// process holds. With a thread fewer, every thread has a core. The governor reads how long this
// process's threads waited in the kernel's run queue during a step (/proc/self/task/*/schedstat:
// time runnable but not running, which idle waits and communication do not count): past half a
// core per second it drops a thread; every `probe_interval` steps below the start size it tries a
// thread more and keeps it if the threads did not wait. The first steps (threads and caches
// warming up) decide nothing. Measured on 2 cores: an idle machine's steps wait 0.00-0.2 cores,
// beside one busy process 0.8-1.2. Results do not change with the team size
// (every reduction is cut into parts fixed by its size, plexus_kernels/parts.hpp, and every
// matrix product into one slice per CPU of the machine), so adapting costs no reproducibility.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace plexus {

class ThreadGovernor {
 public:
  // For a team of `max_threads` (the OpenMP team size as started); nullptr when there is nothing
  // to adapt (one thread) or the kernel does not report run-queue waits.
  static std::unique_ptr<ThreadGovernor> start(int max_threads);

  // Before a step: the waits so far, so that the step's are its own (not an evaluation's).
  void before_step();
  // After a step of `seconds`: reads the waits since before_step and sets the team size for the
  // next step (omp_set_num_threads on the calling thread, which drives the layers). Returns a line
  // for the log when the size changed for a reason worth telling (not a probe that failed).
  std::optional<std::string> after_step(double seconds);

  int threads() const noexcept { return threads_; }
  // The last step's run-queue wait, in cores (seconds waited per second).
  double waited_cores() const noexcept { return waited_cores_; }
  int max_threads() const noexcept { return max_; }

  // The fraction of a core per second above which the process is taken to be short of cores.
  static constexpr double kWaitedCores = 0.5;
  static constexpr int64_t kWarmupSteps = 3;     // steps that decide nothing
  static constexpr int64_t kFirstProbe = 20;     // steps below max before trying a thread more
  static constexpr int64_t kLongestProbe = 320;  // the interval doubles after each failed probe

 private:
  explicit ThreadGovernor(int max_threads);
  void set_threads(int threads);

  int max_ = 1, threads_ = 1;
  double waited_ = 0;  // the run-queue seconds read last
  double waited_cores_ = 0;
  bool probing_ = false;
  int64_t steps_ = 0, steps_since_change_ = 0, probe_interval_ = kFirstProbe;
};

// The sum of every thread's run-queue wait in this process so far, in seconds; nullopt when the
// kernel does not report it.
std::optional<double> run_queue_seconds();

}  // namespace plexus

#include "engine/thread_governor.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace plexus {

std::optional<double> run_queue_seconds() {
  // Each thread's schedstat: nanoseconds on a CPU, nanoseconds waiting on a run queue, slices.
  std::error_code error;
  std::filesystem::directory_iterator tasks("/proc/self/task", error);
  if (error) return std::nullopt;
  double waited = 0;
  bool read_any = false;
  for (const auto& task : tasks) {
    std::ifstream in(task.path() / "schedstat");
    unsigned long long on_cpu = 0, queued = 0;
    if (!(in >> on_cpu >> queued)) continue;  // a thread that just ended
    waited += static_cast<double>(queued) * 1e-9;
    read_any = true;
  }
  if (!read_any) return std::nullopt;
  return waited;
}

ThreadGovernor::ThreadGovernor(int max_threads) : max_(max_threads), threads_(max_threads) {}

std::unique_ptr<ThreadGovernor> ThreadGovernor::start(int max_threads) {
  if (max_threads <= 1) return nullptr;
  const std::optional<double> waited = run_queue_seconds();
  if (!waited) return nullptr;
  std::unique_ptr<ThreadGovernor> governor(new ThreadGovernor(max_threads));
  governor->waited_ = *waited;
  return governor;
}

void ThreadGovernor::set_threads(int threads) {
  threads_ = threads;
  omp_set_num_threads(threads);
  steps_since_change_ = 0;
}

void ThreadGovernor::before_step() {
  if (const std::optional<double> now = run_queue_seconds()) waited_ = *now;
}

std::optional<std::string> ThreadGovernor::after_step(double seconds) {
  const std::optional<double> now = run_queue_seconds();
  if (!now || seconds <= 0) return std::nullopt;
  const double waited_cores = waited_cores_ = (*now - waited_) / seconds;
  waited_ = *now;
  ++steps_since_change_;
  if (++steps_ <= kWarmupSteps) return std::nullopt;
  const bool short_of_cores = waited_cores > kWaitedCores;
  const std::string was = std::to_string(threads_);
  if (probing_) {  // the step ran with a thread more than before
    probing_ = false;
    if (short_of_cores) {
      set_threads(threads_ - 1);
      probe_interval_ = std::min(kLongestProbe, probe_interval_ * 2);
      return std::nullopt;
    }
    probe_interval_ = kFirstProbe;
    return "OpenMP threads back up to " + was + ": nobody waited for a core with one thread more";
  }
  if (short_of_cores && threads_ > 1) {
    set_threads(threads_ - 1);
    probe_interval_ = kFirstProbe;
    char waited[32];
    std::snprintf(waited, sizeof(waited), "%.2f", waited_cores);
    return "OpenMP threads " + was + " -> " + std::to_string(threads_) + ": the threads waited " + waited +
           " cores for the CPU last step (another process is busy here); a thread more is tried again in " +
           std::to_string(probe_interval_) + " steps";
  }
  if (threads_ < max_ && steps_since_change_ >= probe_interval_) {
    set_threads(threads_ + 1);
    probing_ = true;
  }
  return std::nullopt;
}

}  // namespace plexus

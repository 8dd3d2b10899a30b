// Timing and the machine's reference bandwidth for `plexus bench`: the statistics of repeated
// runs of a call, and a plain streaming copy on the same device and threads as the backends,
// so a primitive's GB/s can be read as a fraction of what the memory gives a copy.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

namespace plexus::cli::bench {

// Milliseconds of repeated runs: the samples in run order and their order statistics
// (p10 / p90 by nearest rank: with 20 samples the 2nd and 18th fastest).
struct Stats {
  std::vector<double> samples_ms;
  double median = 0, min = 0, max = 0, p10 = 0, p90 = 0;
};
Stats summarize(std::vector<double> samples_ms);

// Runs fn `warmup` times untimed, then `repeats` times timed; on a GPU each run is followed by
// a synchronization of the device, so a sample is the work's completion time.
Stats time_runs(int warmup, int repeats, DLDevice device, const std::function<void()>& fn);

// The threads the backends run on: OpenMP's team size (OMP_NUM_THREADS), which this process's
// copy loop shares with the plugins (one OpenMP runtime per process).
int cpu_threads();
// "model name" of /proc/cpuinfo, or "" where there is none.
std::string cpu_model();

struct CopyBandwidth {
  // (bytes read + bytes written) / the fastest copy's time, 1 GB = 1e9 bytes: the best rate,
  // as STREAM reports it (another process on the machine only ever slows a copy down).
  double gb_per_s = 0;
  std::size_t bytes = 0;  // the size of each of the two arrays
  int threads = 0;        // CPU: OpenMP threads; GPU: 0
  Stats stats;            // per copy
};
// A streaming copy dst = src of two arrays of `bytes` each on `device`: on the CPU memcpy of one
// contiguous part per OpenMP thread (as the backends cut their tokens), on a GPU the runtime's
// device-to-device copy. Small arrays are copied several times per sample so one
// sample lasts long enough for the clock; max(repeats, 50) samples after 2 warm-up ones, or as
// many as half a second allows.
CopyBandwidth measure_copy(DLDevice device, std::size_t bytes, int repeats);

}  // namespace plexus::cli::bench

// What each rank did when, for a few training steps: every unit stage's forward and backward per
// microbatch and chunk, the waits for pipeline transfers, the gradient reduction and the
// optimizer, as spans on this rank's clock. On with train.trace (docs/config.md); the trainer
// writes the spans as a Chrome / Perfetto trace (chrome://tracing, ui.perfetto.dev), one process
// per rank, and scripts/plot_trace.py draws it and measures the pipeline bubble.
//
// Times are microseconds since the origin every rank takes just after a barrier, so the ranks of
// one machine line up to the barrier's exit skew. On a GPU each span synchronizes the device at
// its ends (as train.profile does), so a span is the work itself and not its launch.
#pragma once

#include <boost/json/object.hpp>

#include <optional>

#include <dlpack/dlpack.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace plexus {

class Timeline {
 public:
  // One span: its name, its category (forward, backward, comm, update, step) and its numbers.
  struct Span {
    std::string name;
    const char* category = "";
    double start_us = 0, duration_us = 0;
    int64_t microbatch = -1, chunk = -1;  // -1: not about one
  };

  // RAII record of one span; does nothing when made from a null or paused timeline.
  class Scope {
   public:
    Scope(Timeline* timeline, const std::string& name, const char* category, int64_t microbatch = -1,
          int64_t chunk = -1);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timeline* timeline_;
    Span span_;
  };

  explicit Timeline(DLDevice device);

  // Starts the clock (call on every rank right after a barrier).
  void set_origin() noexcept { origin_ = std::chrono::steady_clock::now(); }
  // Spans are kept only while recording (the steps train.trace names).
  void record(bool on) noexcept { recording_ = on; }
  bool recording() const noexcept { return recording_; }
  const std::vector<Span>& spans() const noexcept { return spans_; }

  // This rank's Chrome trace events, one JSON object per line, as a process `pid` named
  // `process_name` with one thread.
  std::string trace_events(int64_t pid, const std::string& process_name) const;

 private:
  double now_us() const;

  DLDevice device_;
  bool recording_ = false;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::vector<Span> spans_;
};

// Writes a Chrome trace file ({"displayTimeUnit": "ms", "traceEvents": [...]}) of the ranks'
// trace_events, replacing `path` atomically.
void write_chrome_trace(const std::filesystem::path& path, const std::vector<std::string>& ranks_events);

namespace distributed {
class Runtime;
}
// Collective over the world: every rank's trace_events at world rank 0, in rank order (the other
// ranks get nothing; without a runtime, `mine` alone). The spans travel over the job's world group
// rather than through files, so the ranks need not share a file system.
std::vector<std::string> gather_trace_events(const distributed::Runtime* runtime, const std::string& mine);

// The end of a traced window, on every rank (collective over the world): recording stops, every
// rank's events (this one's as process `process_name`) go to world rank 0, which writes
// output_dir/trace.json and logs it. Returns the "trace" metrics record on world rank 0, nothing
// elsewhere. Steps are 1-based.
std::optional<boost::json::object> write_job_trace(Timeline& timeline, const distributed::Runtime* runtime,
                                                   const std::string& process_name,
                                                   const std::filesystem::path& output_dir,
                                                   int64_t first_step, int64_t last_step);

}  // namespace plexus

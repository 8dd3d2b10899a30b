// Where a training step's time goes, part by part: each unit's forward and backward, the mHC
// connection around each decoder sublayer, the optimizer, the gradient averaging of data
// parallelism. On with train.profile (docs/config.md); the trainer then writes a "profile" record
// per log interval to metrics.jsonl and a table at the end of the run.
//
// Times are wall-clock and exclusive: a part timed inside another (the mHC connection inside a
// decoder unit's stage) is taken out of the enclosing part, so the parts add up to the step. On a
// GPU every timed part starts and ends with a device synchronization, so the times are those of
// the work itself; this serializes what would otherwise overlap and slows the step, which is why
// profiling is off by default.
#pragma once

#include <dlpack/dlpack.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace plexus {

class StepProfile {
 public:
  enum class Phase { forward, backward, update };

  // RAII timer of one part; does nothing when made from a null profile.
  class Scope {
   public:
    Scope(StepProfile* profile, const std::string& part, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepProfile* profile_;
    std::size_t part_ = 0;
    Phase phase_ = Phase::forward;
    Scope* parent_ = nullptr;
    double nested_seconds_ = 0;  // time of the parts timed inside this one
    std::chrono::steady_clock::time_point start_;
  };

  explicit StepProfile(DLDevice device);

  // Closes a step of `seconds` (the trainer's wall time for it).
  void end_step(double seconds);
  // Per-step averages over the steps since the previous call, as a metrics record's fields:
  // {"steps", "step_ms", "parts": [{"part", "forward_ms", "backward_ms", "update_ms"}...],
  // "untimed_ms"} (untimed: the step's time outside every part: data, loss reads, launches).
  // Parts appear in the order they were first timed.
  boost::json::object take_window();
  // The same over the whole run, as a text table.
  std::string table() const;

 private:
  struct Totals {
    std::vector<double> seconds;  // per part and phase: [part * 3 + phase]
    double step_seconds = 0;
    int64_t steps = 0;
  };
  std::size_t part_index(const std::string& part);
  void add(std::size_t part, Phase phase, double seconds);
  void synchronize() const;

  DLDevice device_;
  std::vector<std::string> parts_;
  std::unordered_map<std::string, std::size_t> index_;
  Totals window_, run_;
  Scope* open_ = nullptr;  // the innermost scope being timed
};

}  // namespace plexus

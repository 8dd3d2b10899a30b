// What a person watching a run sees: on a terminal one line that updates in place; in a log
// file (not a terminal) one plain line every log_interval steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace plexus::detail {

class Progress {
 public:
  Progress(int64_t first_step, int64_t total_steps, int64_t log_interval);
  // gflops and mfu (a fraction) are shown when not negative.
  void step(int64_t step, double loss, double lr, double tokens_per_s, double gflops_or_negative,
            double mfu_or_negative = -1);
  // Prints a full line (evaluation results, samples), keeping the live line intact.
  void line(const std::string& text);
  void finish();

 private:
  static std::string duration(double seconds);
  bool terminal_;
  bool live_line_ = false;
  int64_t first_step_, total_steps_, log_interval_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace plexus::detail

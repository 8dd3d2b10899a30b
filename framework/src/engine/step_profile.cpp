#include "plexus/core/engine/step_profile.hpp"

#include <algorithm>
#include <cstdio>

#include "plexus/core/device.hpp"

namespace plexus {
namespace {

constexpr std::size_t kPhases = 3;

double ms(double seconds, int64_t steps) {
  return steps > 0 ? seconds * 1e3 / static_cast<double>(steps) : 0.0;
}

}  // namespace

StepProfile::Scope::Scope(StepProfile* profile, const std::string& part, Phase phase)
    : profile_(profile), phase_(phase) {
  if (profile_ == nullptr) return;
  part_ = profile_->part_index(part);
  profile_->synchronize();  // work queued before this part is not this part's
  parent_ = profile_->open_;
  profile_->open_ = this;
  start_ = std::chrono::steady_clock::now();
}

StepProfile::Scope::~Scope() {
  if (profile_ == nullptr) return;
  try {
    profile_->synchronize();
  } catch (...) {
    // A destructor must not throw (this one also runs while a failed part unwinds); a device
    // that cannot synchronize fails the step's next device call, which reports it.
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  profile_->add(part_, phase_, std::max(0.0, elapsed - nested_seconds_));
  if (parent_ != nullptr) parent_->nested_seconds_ += elapsed;
  profile_->open_ = parent_;
}

StepProfile::StepProfile(DLDevice device) : device_(device) {}

std::size_t StepProfile::part_index(const std::string& part) {
  const auto [it, inserted] = index_.try_emplace(part, parts_.size());
  if (inserted) {
    parts_.push_back(part);
    window_.seconds.resize(parts_.size() * kPhases, 0.0);
    run_.seconds.resize(parts_.size() * kPhases, 0.0);
  }
  return it->second;
}

void StepProfile::add(std::size_t part, Phase phase, double seconds) {
  const std::size_t at = part * kPhases + static_cast<std::size_t>(phase);
  window_.seconds[at] += seconds;
  run_.seconds[at] += seconds;
}

void StepProfile::synchronize() const {
  device::synchronize(device_);  // a no-op on the CPU
}

void StepProfile::end_step(double seconds) {
  for (Totals* t : {&window_, &run_}) {
    t->step_seconds += seconds;
    ++t->steps;
  }
}

boost::json::object StepProfile::take_window() {
  boost::json::array parts;
  double timed = 0;
  for (std::size_t p = 0; p < parts_.size(); ++p) {
    boost::json::object entry{{"part", parts_[p]}};
    const char* names[kPhases] = {"forward_ms", "backward_ms", "update_ms"};
    for (std::size_t phase = 0; phase < kPhases; ++phase) {
      const double s = window_.seconds[p * kPhases + phase];
      if (s > 0) entry[names[phase]] = ms(s, window_.steps);
      timed += s;
    }
    parts.push_back(std::move(entry));
  }
  boost::json::object record{{"steps", window_.steps},
                             {"step_ms", ms(window_.step_seconds, window_.steps)},
                             {"parts", std::move(parts)},
                             {"untimed_ms", ms(std::max(0.0, window_.step_seconds - timed), window_.steps)}};
  std::fill(window_.seconds.begin(), window_.seconds.end(), 0.0);
  window_.step_seconds = 0;
  window_.steps = 0;
  return record;
}

std::string StepProfile::table() const {
  if (run_.steps == 0) return "";
  std::size_t width = 30;  // room for the "untimed" row
  for (const std::string& p : parts_) width = std::max(width, p.size());
  std::string out;
  char line[512];
  const int w = static_cast<int>(width);
  std::snprintf(line, sizeof line, "%-*s  %10s  %10s  %10s  %6s\n", w, "part", "forward ms", "backward ms",
                "update ms", "share");
  out += line;
  double timed = 0;
  for (std::size_t p = 0; p < parts_.size(); ++p) {
    double values[kPhases];
    double sum = 0;
    for (std::size_t phase = 0; phase < kPhases; ++phase) {
      values[phase] = ms(run_.seconds[p * kPhases + phase], run_.steps);
      sum += run_.seconds[p * kPhases + phase];
    }
    timed += sum;
    std::snprintf(line, sizeof line, "%-*s  %10.3f  %10.3f  %10.3f  %5.1f%%\n", w, parts_[p].c_str(),
                  values[0], values[1], values[2], 100.0 * sum / run_.step_seconds);
    out += line;
  }
  const double untimed = std::max(0.0, run_.step_seconds - timed);
  std::snprintf(line, sizeof line, "%-*s  %34.3f  %5.1f%%\n", w, "untimed (data, loss, launches)",
                ms(untimed, run_.steps), 100.0 * untimed / run_.step_seconds);
  out += line;
  std::snprintf(line, sizeof line, "%-*s  %34.3f  (mean of %lld steps)\n", w, "step",
                ms(run_.step_seconds, run_.steps), static_cast<long long>(run_.steps));
  out += line;
  return out;
}

}  // namespace plexus

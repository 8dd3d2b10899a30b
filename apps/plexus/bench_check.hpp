// The check of `plexus bench`: the same inputs through a timed backend and a reference one,
// from zeroed outputs, and per output or gradient the largest difference scaled by the
// reference's largest magnitude (what the family's parity tests measure).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plexus/bench_workload.hpp"

namespace plexus::cli::bench {

// Each output of the directions run, copied to the host as double.
using Snapshot = std::map<std::string, std::vector<double>>;

// Runs the directions asked for once from zeroed outputs (the forward also when only the
// backward is asked: the sublayer's backward reads its outputs) and copies their outputs.
Snapshot run_once(Workload& w, const MhcBackend& backend, const std::vector<Direction>& directions);

// max|a - b| / max|b|, or max|a - b| where b is all zeros; infinity for a NaN on either side.
double relative_difference(const std::vector<double>& a, const std::vector<double>& b);

struct CheckResult {
  std::vector<std::pair<std::string, double>> tensors;  // the direction's outputs, in call order
  std::string worst;                                    // the tensor with the largest difference
  double worst_value = 0.0;
};
CheckResult compare(const Workload& w, Direction d, const Snapshot& ours, const Snapshot& reference);

}  // namespace plexus::cli::bench

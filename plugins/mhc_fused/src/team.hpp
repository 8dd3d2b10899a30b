// The threading of mhc_fused: a loop over tokens cut into parts, each part one contiguous range,
// the parts shared among the OpenMP threads.
//
// Determinism: the number of parts depends only on the size of the work
// (plexus_kernels/parts.hpp), never on the thread count or on which thread runs which part, so
// the per-part partial sums of the parameter gradients (dphi, dalpha, db, dbias), combined in
// part order after the parallel region, are the same bits with any number of threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

#include "plexus_kernels/parts.hpp"

namespace plexus::mhc_fused {

// Below this many elementary operations a loop runs on the calling thread: waking the team
// costs a few microseconds, about what 2^15 multiply-adds take.
constexpr double kParallelWork = double(1 << 15);

// The number of parts a loop over `items` independent items of `work` operations in all is cut
// into: 1 for small work, inside another parallel region, or for a single item; else a count
// fixed by the items alone.
inline int part_count(int64_t items, double work) {
  if (items <= 1 || work < kParallelWork || omp_in_parallel()) return 1;
  return plexus::kernels::reduction_parts(items, true);
}

// The items [begin, end) that part `part` of `parts` handles (plexus_kernels/parts.hpp).
using Range = plexus::kernels::PartRange;
using plexus::kernels::part_range;

// Runs body(part, parts) once for each part in [0, parts), the parts shared among the OpenMP
// threads. An exception a body throws is rethrown here, after the region: none may leave an
// OpenMP region.
template <class Body>
void run_parts(int parts, Body&& body) {
  if (parts <= 1) {
    body(0, 1);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel for schedule(static)
  for (int part = 0; part < parts; ++part) {
    try {
      body(part, parts);
    } catch (...) {
#pragma omp critical(plexus_mhc_fused_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace plexus::mhc_fused

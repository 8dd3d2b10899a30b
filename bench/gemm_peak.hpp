// The GEMM peak of this process's threads, measured the way the CPU layers run their products
// (plexus_kernels::gemm_parallel: the product split over the OpenMP threads, one single-threaded
// OpenBLAS call each): the best GFLOP/s of an n x n x n product over `reps` timed runs after one
// untimed run, 2 FLOPs per multiply-add. The yardstick for "fraction of the machine" figures.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include "plexus_kernels/gemm.hpp"

namespace plexus::bench {

template <class T>
double gemm_peak(int reps, int64_t n = 2048) {
  using Clock = std::chrono::steady_clock;
  std::vector<T> a(static_cast<std::size_t>(n * n), T(0.5)), b(a.size(), T(0.25)), c(a.size());
  double best = 0;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    plexus::kernels::gemm_parallel<T>(plexus::kernels::Trans::N, plexus::kernels::Trans::T, n, n, n, T(1),
                                      a.data(), n, b.data(), n, T(0), c.data(), n);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r > 0) best = std::max(best, 2.0 * std::pow(static_cast<double>(n), 3) / s / 1e9);
  }
  return best;
}

}  // namespace plexus::bench

// The machine's float32 matrix-product peak on this process's threads: the yardstick of every
// "fraction of the hardware" figure in docs/performance.md (bench/train_vs_torch.py reads it for
// its MFU column). Two ways are measured and the better one is the peak, so no fraction is
// flattered by a slow denominator:
//   split     plexus_kernels::gemm_parallel, as the CPU layers run their products: the product
//             cut into one block per OpenMP thread, one single-threaded OpenBLAS call each;
//   blas      one OpenBLAS call with OpenBLAS's own pool at the same thread count.
// Square products n = 1024, 2048, 4096, best GFLOP/s of --reps timed runs after one untimed run.
//
//   cmake --build build --target bench_peak
//   OMP_NUM_THREADS=2 build/bin/bench_peak [--reps 5] [--json FILE]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "gemm_peak.hpp"
#include "plexus_kernels/gemm.hpp"
#include "plexus_kernels/threading.hpp"

namespace {

// The best GFLOP/s of one n^3 float product through a single BLAS call (its own pool).
double blas_peak(int reps, int64_t n) {
  using Clock = std::chrono::steady_clock;
  std::vector<float> a(static_cast<std::size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size());
  double best = 0;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    plexus::kernels::gemm<float>(plexus::kernels::Trans::N, plexus::kernels::Trans::T, n, n, n, 1.0f, a.data(), n,
                                 b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r > 0) best = std::max(best, 2.0 * std::pow(static_cast<double>(n), 3) / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::string json_file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else if (arg == "--json" && i + 1 < argc) {
      json_file = argv[++i];
    } else {
      std::cerr << "usage: bench_peak [--reps 5] [--json FILE]  (threads: OMP_NUM_THREADS)\n";
      return 2;
    }
  }
  if (reps < 1) {
    std::cerr << "bench_peak: --reps must be at least 1\n";
    return 2;
  }
  const int threads = omp_get_max_threads();
  boost::json::array rows;
  double peak = 0;
  std::string peak_way;
  plexus::kernels::use_single_threaded_blas();
  std::printf("float32 GEMM on %d threads (%s)\n", threads, plexus::kernels::threading_description());
  for (const int64_t n : {1024, 2048, 4096}) {
    plexus::kernels::use_single_threaded_blas();
    const double split = plexus::bench::gemm_peak<float>(reps, n);
    double blas = 0;
    if (plexus::kernels::set_blas_threads(threads)) blas = blas_peak(reps, n);
    plexus::kernels::use_single_threaded_blas();
    std::printf("  n = %5lld   split %7.1f GFLOP/s   blas %7.1f GFLOP/s\n", static_cast<long long>(n), split, blas);
    rows.push_back({{"n", n}, {"split_gflops", split}, {"blas_gflops", blas}});
    if (split > peak) peak = split, peak_way = "split n=" + std::to_string(n);
    if (blas > peak) peak = blas, peak_way = "blas n=" + std::to_string(n);
  }
  std::printf("peak: %.1f GFLOP/s (%s)\n", peak, peak_way.c_str());
  if (!json_file.empty()) {
    std::ofstream out(json_file);
    out << boost::json::serialize(boost::json::object{{"threads", threads},
                                                     {"peak_gflops", peak},
                                                     {"peak_way", peak_way},
                                                     {"rows", rows}})
        << "\n";
    if (!out) {
      std::cerr << "bench_peak: cannot write " << json_file << "\n";
      return 1;
    }
  }
  return 0;
}

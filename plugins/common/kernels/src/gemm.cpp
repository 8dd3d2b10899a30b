#include "plexus_kernels/gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <thread>

namespace plexus::kernels {
namespace {

CBLAS_TRANSPOSE op(Trans t) {
  return t == Trans::T ? CblasTrans : CblasNoTrans;
}

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("gemm: ") + what + " = " + std::to_string(v) +
                                " is out of BLAS's range");
  return static_cast<int>(v);
}

// Below this many multiply-adds one thread does the whole product (splitting costs more than it
// saves: thread wake-up is a few microseconds).
constexpr double kParallelWork = 96.0 * 96.0 * 96.0;

void blas(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas(Trans ta, Trans tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
          int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <class T>
void gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // BLAS requires leading dimensions of at least 1 (and the row length) even when k == 0.
  const int64_t a_cols = ta == Trans::N ? k : m;
  const int64_t b_cols = tb == Trans::N ? n : k;
  blas(ta, tb, to_int(m, "m"), to_int(n, "n"), to_int(k, "k"), alpha, a,
       to_int(std::max<int64_t>({lda, a_cols, 1}), "lda"), b,
       to_int(std::max<int64_t>({ldb, b_cols, 1}), "ldb"), beta, c, to_int(ldc, "ldc"));
}

template <class T>
void gemm_parallel(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                   const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (work < kParallelWork) {
    gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Validate here: nothing may throw inside the parallel region (the slices are no larger).
  (void)to_int(m, "m"), (void)to_int(n, "n"), (void)to_int(k, "k");
  (void)to_int(lda, "lda"), (void)to_int(ldb, "ldb"), (void)to_int(ldc, "ldc");
  // Cut the larger output dimension into one slice per CPU of the machine, in multiples of 16 so
  // every slice but the last keeps BLAS's micro-kernel tiles full; the team's threads share them.
  // Not one per thread, nor per core the process may use: BLAS picks its kernel, and so its
  // summation order, by the shape of each call, so slices that followed the thread count, the
  // process's CPU binding or its share of the machine would make the results follow them too.
  // With these, 1 thread, a team that shrinks while the machine is busy (run.adapt_threads) and
  // ranks bound to a core each compute the same bits.
  static const int64_t cores = std::max(1U, std::thread::hardware_concurrency());
  const bool by_rows = m >= n;
  const int64_t extent = by_rows ? m : n;
  constexpr int64_t kAlign = 16;
  int64_t slice = (extent + cores - 1) / cores;
  slice = (slice + kAlign - 1) / kAlign * kAlign;
  const int64_t parts = (extent + slice - 1) / slice;
#pragma omp parallel for schedule(static) if (parts > 1 && !omp_in_parallel())
  for (int64_t part = 0; part < parts; ++part) {
    const int64_t begin = part * slice;
    const int64_t end = std::min(extent, begin + slice);
    if (by_rows) {
      const T* a_part = ta == Trans::N ? a + begin * lda : a + begin;
      gemm(ta, tb, end - begin, n, k, alpha, a_part, lda, b, ldb, beta, c + begin * ldc, ldc);
    } else {
      const T* b_part = tb == Trans::N ? b + begin : b + begin * ldb;
      gemm(ta, tb, m, end - begin, k, alpha, a, lda, b_part, ldb, beta, c + begin, ldc);
    }
  }
}

template void gemm<float>(Trans, Trans, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                          int64_t, float, float*, int64_t);
template void gemm<double>(Trans, Trans, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void gemm_parallel<float>(Trans, Trans, int64_t, int64_t, int64_t, float, const float*, int64_t,
                                   const float*, int64_t, float, float*, int64_t);
template void gemm_parallel<double>(Trans, Trans, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                    const double*, int64_t, double, double*, int64_t);

}  // namespace plexus::kernels

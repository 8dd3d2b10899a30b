// plexus_kernels: dense matrix products through CBLAS (row-major).
//
//   C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C
//
// op(X) is X (Trans::N) or its transpose (Trans::T). Leading dimensions are row strides in
// elements, as in cblas_?gemm with CblasRowMajor: A is stored [m, k] (N) or [k, m] (T), B is
// stored [k, n] (N) or [n, k] (T). k == 0 scales C by beta.
#pragma once

#include <cstdint>

namespace plexus::kernels {

enum class Trans : bool { N = false, T = true };

// One BLAS call on the calling thread.
template <class T>
void gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc);

// The same product split across the OpenMP threads: C is cut into one block of rows (or of
// columns, whichever dimension is larger) per thread, and each thread makes one BLAS call. Falls
// back to gemm() for small products, one thread, or when already inside a parallel region.
template <class T>
void gemm_parallel(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                   const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace plexus::kernels

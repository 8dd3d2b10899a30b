#include "plexus_kernels/norm.hpp"

#include <omp.h>

#include <cmath>
#include <vector>

#include "parallel.hpp"
#include "plexus_kernels/parts.hpp"

namespace plexus::kernels {
namespace {

using detail::worth_parallel;

// Adds the parts' partial column sums into `out` (+=) in part order (plexus_kernels/parts.hpp).
template <class T>
void add_partials(const std::vector<T>& partials, int parts, int64_t cols, T* out) {
  for (int p = 0; p < parts; ++p) {
    const T* src = partials.data() + static_cast<int64_t>(p) * cols;
    for (int64_t c = 0; c < cols; ++c) out[c] += src[c];
  }
}

int parts_of(int64_t rows, int64_t cols) {
  return reduction_parts(rows, worth_parallel(rows * cols) && !omp_in_parallel());
}

}  // namespace

template <class T>
void rmsnorm_forward(int64_t rows, int64_t cols, const T* x, const T* w, T eps, T* y, T* xhat, T* rstd) {
  const T inv_cols = T(1) / static_cast<T>(cols);
#pragma omp parallel for schedule(static) if (worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const T rs = T(1) / std::sqrt(ss * inv_cols + eps);
    if (xhat != nullptr) {
      T* hr = xhat + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        hr[c] = xr[c] * rs;
        yr[c] = hr[c] * w[c];
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] * rs) * w[c];
    }
    if (rstd != nullptr) rstd[r] = rs;
  }
}

template <class T>
void layernorm_forward(int64_t rows, int64_t cols, const T* x, const T* w, const T* b, T eps, T* y, T* xhat,
                       T* rstd) {
  const T inv_cols = T(1) / static_cast<T>(cols);
#pragma omp parallel for schedule(static) if (worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += xr[c];
    const T mean = sum * inv_cols;
    T ss = 0;  // two passes: no cancellation in the variance
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < cols; ++c) ss += (xr[c] - mean) * (xr[c] - mean);
    const T rs = T(1) / std::sqrt(ss * inv_cols + eps);
    if (xhat != nullptr) {
      T* hr = xhat + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        hr[c] = (xr[c] - mean) * rs;
        yr[c] = hr[c] * w[c] + b[c];
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) yr[c] = ((xr[c] - mean) * rs) * w[c] + b[c];
    }
    if (rstd != nullptr) rstd[r] = rs;
  }
}

template <class T>
void rmsnorm_backward(int64_t rows, int64_t cols, const T* dy, const T* xhat, const T* rstd, const T* w,
                      T* dx, T* dw) {
  const T inv_cols = T(1) / static_cast<T>(cols);
  const int parts = parts_of(rows, cols);
  std::vector<T> partials(dw != nullptr ? static_cast<std::size_t>(parts * cols) : 0, T(0));
#pragma omp parallel for schedule(static) if (parts > 1)
  for (int part = 0; part < parts; ++part) {
    T* mine = dw != nullptr ? partials.data() + static_cast<int64_t>(part) * cols : nullptr;
    const PartRange range = part_range(rows, part, parts);
    for (int64_t r = range.begin; r < range.end; ++r) {
      const T* g = dy + r * cols;
      const T* h = xhat + r * cols;
      if (mine != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) mine[c] += g[c] * h[c];
      }
      if (dx != nullptr) {
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < cols; ++c) dot += g[c] * w[c] * h[c];
        dot *= inv_cols;
        const T rs = rstd[r];
        T* d = dx + r * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) d[c] = rs * (g[c] * w[c] - h[c] * dot);
      }
    }
  }
  if (dw != nullptr) add_partials(partials, parts, cols, dw);
}

template <class T>
void layernorm_backward(int64_t rows, int64_t cols, const T* dy, const T* xhat, const T* rstd, const T* w,
                        T* dx, T* dw, T* db) {
  const T inv_cols = T(1) / static_cast<T>(cols);
  const int parts = parts_of(rows, cols);
  std::vector<T> dw_partials(dw != nullptr ? static_cast<std::size_t>(parts * cols) : 0, T(0));
  std::vector<T> db_partials(db != nullptr ? static_cast<std::size_t>(parts * cols) : 0, T(0));
#pragma omp parallel for schedule(static) if (parts > 1)
  for (int part = 0; part < parts; ++part) {
    const int64_t offset = static_cast<int64_t>(part) * cols;
    T* my_dw = dw != nullptr ? dw_partials.data() + offset : nullptr;
    T* my_db = db != nullptr ? db_partials.data() + offset : nullptr;
    const PartRange range = part_range(rows, part, parts);
    for (int64_t r = range.begin; r < range.end; ++r) {
      const T* g = dy + r * cols;
      const T* h = xhat + r * cols;
      if (my_dw != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) my_dw[c] += g[c] * h[c];
      }
      if (my_db != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) my_db[c] += g[c];
      }
      if (dx != nullptr) {
        T sum = 0, dot = 0;
#pragma omp simd reduction(+ : sum, dot)
        for (int64_t c = 0; c < cols; ++c) {
          const T gw = g[c] * w[c];
          sum += gw;
          dot += gw * h[c];
        }
        sum *= inv_cols;
        dot *= inv_cols;
        const T rs = rstd[r];
        T* d = dx + r * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) d[c] = rs * (g[c] * w[c] - sum - h[c] * dot);
      }
    }
  }
  if (dw != nullptr) add_partials(dw_partials, parts, cols, dw);
  if (db != nullptr) add_partials(db_partials, parts, cols, db);
}

template <class T>
void norm_apply(int64_t rows, int64_t cols, const T* xhat, const T* w, const T* b, T* y) {
#pragma omp parallel for schedule(static) if (worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const T* h = xhat + r * cols;
    T* yr = y + r * cols;
    if (b != nullptr) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) yr[c] = h[c] * w[c] + b[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) yr[c] = h[c] * w[c];
    }
  }
}

#define PLEXUS_KERNELS_NORM(T)                                                                               \
  template void rmsnorm_forward<T>(int64_t, int64_t, const T*, const T*, T, T*, T*, T*);                     \
  template void layernorm_forward<T>(int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*);         \
  template void rmsnorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, T*, T*);       \
  template void layernorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, T*, T*, T*); \
  template void norm_apply<T>(int64_t, int64_t, const T*, const T*, const T*, T*);
PLEXUS_KERNELS_NORM(float)
PLEXUS_KERNELS_NORM(double)
#undef PLEXUS_KERNELS_NORM

}  // namespace plexus::kernels

#include "dt.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "math.hpp"
#include "parallel.hpp"

namespace plexus::mamba {
namespace {

constexpr int64_t kRowBlock = 64;

// A softplus (exp and log1p) costs about as much as this many multiply-adds.
constexpr int64_t kSoftplusCost = 8;

int64_t blocks_of(int64_t rows) {
  return (rows + kRowBlock - 1) / kRowBlock;
}

// Per-block partial sums [blocks, heads], added in block order afterwards: deterministic whatever
// the thread count.
template <class T, class Body>
void sum_over_blocks(int64_t rows, int64_t heads, int64_t work, T* out, Body&& body) {
  const int64_t blocks = blocks_of(rows);
  std::vector<T> partial(static_cast<std::size_t>(blocks * heads), T(0));
#pragma omp parallel for schedule(static) if (detail::worth_parallel(work))
  for (int64_t i = 0; i < blocks; ++i)
    body(i * kRowBlock, std::min(rows, (i + 1) * kRowBlock), partial.data() + i * heads);
  if (out == nullptr) return;
  for (int64_t i = 0; i < blocks; ++i)
    for (int64_t h = 0; h < heads; ++h) out[h] += partial[static_cast<std::size_t>(i * heads + h)];
}

}  // namespace

template <class T>
void dt_forward(int64_t rows, int64_t heads, const T* raw, int64_t ld_raw, const T* bias, T* dt) {
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * heads * kSoftplusCost))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) dt[r * heads + h] = detail::softplus(raw[r * ld_raw + h] + bias[h]);
}

template <class T>
void dt_backward(int64_t rows, int64_t heads, const T* raw, int64_t ld_raw, const T* bias, const T* ddt,
                 T* d_raw, int64_t ld_draw, T* dbias) {
  sum_over_blocks<T>(rows, heads, rows * heads * kSoftplusCost, dbias, [&](int64_t r0, int64_t r1, T* sums) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const T dv = ddt[r * heads + h] * detail::softplus_grad(raw[r * ld_raw + h] + bias[h]);
        d_raw[r * ld_draw + h] = dv;
        sums[h] += dv;
      }
  });
}

template void dt_forward<float>(int64_t, int64_t, const float*, int64_t, const float*, float*);
template void dt_forward<double>(int64_t, int64_t, const double*, int64_t, const double*, double*);
template void dt_backward<float>(int64_t, int64_t, const float*, int64_t, const float*, const float*, float*,
                                 int64_t, float*);
template void dt_backward<double>(int64_t, int64_t, const double*, int64_t, const double*, const double*,
                                  double*, int64_t, double*);
}  // namespace plexus::mamba

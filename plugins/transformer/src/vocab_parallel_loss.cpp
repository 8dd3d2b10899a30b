#include "vocab_parallel_loss.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common.hpp"
#include "plexus_kernels/fast_math.hpp"

namespace plexus::transformer {

template <class T>
kernels::CrossEntropyResult vocab_parallel_cross_entropy(const plexus::sdk::Group& tp, int64_t rows,
                                                         int64_t cols, int64_t first_col, const T* logits,
                                                         const int32_t* targets, T* grad, int32_t ignore) {
  const DLDevice cpu{kDLCPU, 0};
  const auto n = static_cast<std::size_t>(rows);
  // Each row's max over this rank's columns, then over tp: the shift of every exponential.
  std::vector<T> max(n);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    max[static_cast<std::size_t>(r)] = *std::max_element(row, row + cols);
  }
  int64_t shape[1] = {rows};
  DLTensor max_view{max.data(), cpu, 1, dtype_of(precision_v<T>), shape, nullptr, 0};
  tp.all_reduce(max_view, PLX_REDUCE_MAX);
  // [0, rows): the sums of exponentials; [rows, 2 rows): the targets' logits (0 off this rank).
  std::vector<T> sums(2 * n, T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    const T shift = max[static_cast<std::size_t>(r)];
    T sum = 0;
    for (int64_t v = 0; v < cols; ++v) {
      const T e = kernels::detail::exp_fast<T>(row[v] - shift);
      if (grad != nullptr) grad[r * cols + v] = e;
      sum += e;
    }
    sums[static_cast<std::size_t>(r)] = sum;
    const int64_t col = static_cast<int64_t>(targets[r]) - first_col;
    if (targets[r] != ignore && col >= 0 && col < cols) sums[n + static_cast<std::size_t>(r)] = row[col];
  }
  int64_t both[1] = {2 * rows};
  DLTensor sums_view{sums.data(), cpu, 1, dtype_of(precision_v<T>), both, nullptr, 0};
  tp.all_reduce(sums_view);

  kernels::CrossEntropyResult result;
  for (std::size_t r = 0; r < n; ++r) {
    if (targets[r] == ignore) continue;
    result.loss_sum += static_cast<double>(max[r] + std::log(sums[r]) - sums[n + r]);
    ++result.count;
  }
  if (grad == nullptr) return result;
  for (int64_t r = 0; r < rows; ++r) {
    T* g = grad + r * cols;
    if (targets[r] == ignore) {
      std::fill(g, g + cols, T(0));
      continue;
    }
    const T inv = T(1) / sums[static_cast<std::size_t>(r)];
    for (int64_t v = 0; v < cols; ++v) g[v] *= inv;
    const int64_t col = static_cast<int64_t>(targets[r]) - first_col;
    if (col >= 0 && col < cols) g[col] -= T(1);
  }
  return result;
}

template kernels::CrossEntropyResult vocab_parallel_cross_entropy<float>(const plexus::sdk::Group&, int64_t,
                                                                         int64_t, int64_t, const float*,
                                                                         const int32_t*, float*, int32_t);
template kernels::CrossEntropyResult vocab_parallel_cross_entropy<double>(const plexus::sdk::Group&, int64_t,
                                                                          int64_t, int64_t, const double*,
                                                                          const int32_t*, double*, int32_t);

}  // namespace plexus::transformer

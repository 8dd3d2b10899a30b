#include "plexus_kernels/cross_entropy.hpp"

#include <cmath>
#include <vector>

#include "parallel.hpp"
#include "plexus_kernels/fast_math.hpp"
#include "plexus_kernels/parts.hpp"

namespace plexus::kernels {
namespace {

// One row: adds its loss and 1 to loss_sum and count unless its target is `ignore`; writes
// softmax - onehot (or zeros) into grow when given.
template <class T>
void cross_entropy_row(int64_t vocab, const T* row, int32_t target, T* grow, int32_t ignore, double& loss_sum,
                       int64_t& count) {
  if (target == ignore) {
    if (grow != nullptr)
      for (int64_t v = 0; v < vocab; ++v) grow[v] = T(0);
    return;
  }
  T mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int64_t v = 1; v < vocab; ++v) mx = row[v] > mx ? row[v] : mx;
  T sum = 0;
  if (grow != nullptr) {
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < vocab; ++v) {
      const T e = detail::exp_fast<T>(row[v] - mx);
      grow[v] = e;
      sum += e;
    }
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < vocab; ++v) sum += detail::exp_fast<T>(row[v] - mx);
  }
  const T lse = mx + std::log(sum);
  loss_sum += static_cast<double>(lse - row[target]);
  ++count;
  if (grow != nullptr) {
    const T inv = T(1) / sum;
#pragma omp simd
    for (int64_t v = 0; v < vocab; ++v) grow[v] *= inv;
    grow[target] -= T(1);
  }
}

}  // namespace

template <class T>
CrossEntropyResult cross_entropy_forward(int64_t rows, int64_t vocab, const T* logits, const int32_t* targets,
                                         T* grad, int32_t ignore) {
  // The loss summed by parts in part order (plexus_kernels/parts.hpp), not by an OpenMP
  // reduction, whose order follows the thread count.
  const int parts = reduction_parts(rows, detail::worth_parallel(rows * vocab));
  std::vector<double> part_loss(static_cast<std::size_t>(parts), 0.0);
  std::vector<int64_t> part_count(static_cast<std::size_t>(parts), 0);
#pragma omp parallel for schedule(static) if (parts > 1)
  for (int part = 0; part < parts; ++part) {
    const PartRange range = part_range(rows, part, parts);
    for (int64_t r = range.begin; r < range.end; ++r)
      cross_entropy_row(vocab, logits + r * vocab, targets[r], grad != nullptr ? grad + r * vocab : nullptr,
                        ignore, part_loss[static_cast<std::size_t>(part)],
                        part_count[static_cast<std::size_t>(part)]);
  }
  double loss_sum = 0;
  int64_t count = 0;
  for (int part = 0; part < parts; ++part) {
    loss_sum += part_loss[static_cast<std::size_t>(part)];
    count += part_count[static_cast<std::size_t>(part)];
  }
  return CrossEntropyResult{loss_sum, count};
}

template <class T>
void split_cross_entropy_max(int64_t rows, int64_t cols, const T* logits, T* max) {
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    T mx = row[0];
    for (int64_t v = 1; v < cols; ++v) mx = row[v] > mx ? row[v] : mx;
    max[r] = mx;
  }
}

template <class T>
void split_cross_entropy_sums(int64_t rows, int64_t cols, int64_t first_col, const T* logits,
                              const int32_t* targets, const T* max, T* grad, T* sums, int32_t ignore) {
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * cols;
    T* grow = grad != nullptr ? grad + r * cols : nullptr;
    T sum = 0;
    for (int64_t v = 0; v < cols; ++v) {
      const T e = detail::exp_fast<T>(row[v] - max[r]);
      if (grow != nullptr) grow[v] = e;
      sum += e;
    }
    sums[r] = sum;
    const int64_t col = static_cast<int64_t>(targets[r]) - first_col;
    sums[rows + r] = targets[r] != ignore && col >= 0 && col < cols ? row[col] : T(0);
  }
}

template <class T>
CrossEntropyResult split_cross_entropy_finish(int64_t rows, int64_t cols, int64_t first_col,
                                              const int32_t* targets, const T* max, const T* sums, T* grad,
                                              int32_t ignore) {
  CrossEntropyResult result;  // summed in row order: the same on every rank
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore) continue;
    result.loss_sum += static_cast<double>(max[r] + std::log(sums[r]) - sums[rows + r]);
    ++result.count;
  }
  if (grad == nullptr) return result;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    T* g = grad + r * cols;
    if (targets[r] == ignore) {
      for (int64_t v = 0; v < cols; ++v) g[v] = T(0);
      continue;
    }
    const T inv = T(1) / sums[r];
    for (int64_t v = 0; v < cols; ++v) g[v] *= inv;
    const int64_t col = static_cast<int64_t>(targets[r]) - first_col;
    if (col >= 0 && col < cols) g[col] -= T(1);
  }
  return result;
}

#define PLEXUS_KERNELS_SPLIT_CROSS_ENTROPY(T)                                                              \
  template void split_cross_entropy_max<T>(int64_t, int64_t, const T*, T*);                                \
  template void split_cross_entropy_sums<T>(int64_t, int64_t, int64_t, const T*, const int32_t*, const T*, \
                                            T*, T*, int32_t);                                              \
  template CrossEntropyResult split_cross_entropy_finish<T>(int64_t, int64_t, int64_t, const int32_t*,     \
                                                            const T*, const T*, T*, int32_t);
PLEXUS_KERNELS_SPLIT_CROSS_ENTROPY(float)
PLEXUS_KERNELS_SPLIT_CROSS_ENTROPY(double)
#undef PLEXUS_KERNELS_SPLIT_CROSS_ENTROPY

template CrossEntropyResult cross_entropy_forward<float>(int64_t, int64_t, const float*, const int32_t*,
                                                         float*, int32_t);
template CrossEntropyResult cross_entropy_forward<double>(int64_t, int64_t, const double*, const int32_t*,
                                                          double*, int32_t);

}  // namespace plexus::kernels

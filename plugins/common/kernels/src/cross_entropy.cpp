#include "plexus_kernels/cross_entropy.hpp"

#include <cmath>

#include "plexus_kernels/fast_math.hpp"
#include "parallel.hpp"

namespace plexus::kernels {

template <class T>
CrossEntropyResult cross_entropy_forward(int64_t rows, int64_t vocab, const T* logits, const int32_t* targets,
                                         T* grad, int32_t ignore) {
  double loss_sum = 0;
  int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : loss_sum, count) \
    if (detail::worth_parallel(rows * vocab))
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * vocab;
    T* grow = grad != nullptr ? grad + r * vocab : nullptr;
    const int32_t target = targets[r];
    if (target == ignore) {
      if (grow != nullptr)
        for (int64_t v = 0; v < vocab; ++v) grow[v] = T(0);
      continue;
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
  return CrossEntropyResult{loss_sum, count};
}

template CrossEntropyResult cross_entropy_forward<float>(int64_t, int64_t, const float*, const int32_t*,
                                                         float*, int32_t);
template CrossEntropyResult cross_entropy_forward<double>(int64_t, int64_t, const double*, const int32_t*,
                                                          double*, int32_t);

}  // namespace plexus::kernels

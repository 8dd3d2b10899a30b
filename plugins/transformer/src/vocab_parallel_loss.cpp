#include "vocab_parallel_loss.hpp"

#include <vector>

#include "common.hpp"

namespace plexus::transformer {

template <class T>
kernels::CrossEntropyResult vocab_parallel_cross_entropy(const plexus::sdk::Group& tp, int64_t rows,
                                                         int64_t cols, int64_t first_col, const T* logits,
                                                         const int32_t* targets, T* grad, int32_t ignore) {
  const DLDevice cpu{kDLCPU, 0};
  // The rows' max over every rank: the shift of every exponential.
  std::vector<T> max(static_cast<std::size_t>(rows));
  kernels::split_cross_entropy_max<T>(rows, cols, logits, max.data());
  int64_t shape[1] = {rows};
  DLTensor max_view{max.data(), cpu, 1, dtype_of(precision_v<T>), shape, nullptr, 0};
  tp.all_reduce(max_view, PLX_REDUCE_MAX);
  // The sums of exponentials and the targets' logits, summed over every rank in one call.
  std::vector<T> sums(static_cast<std::size_t>(2 * rows));
  kernels::split_cross_entropy_sums<T>(rows, cols, first_col, logits, targets, max.data(), grad, sums.data(),
                                       ignore);
  int64_t both[1] = {2 * rows};
  DLTensor sums_view{sums.data(), cpu, 1, dtype_of(precision_v<T>), both, nullptr, 0};
  tp.all_reduce(sums_view);
  return kernels::split_cross_entropy_finish<T>(rows, cols, first_col, targets, max.data(), sums.data(), grad,
                                                ignore);
}

template kernels::CrossEntropyResult vocab_parallel_cross_entropy<float>(const plexus::sdk::Group&, int64_t,
                                                                         int64_t, int64_t, const float*,
                                                                         const int32_t*, float*, int32_t);
template kernels::CrossEntropyResult vocab_parallel_cross_entropy<double>(const plexus::sdk::Group&, int64_t,
                                                                          int64_t, int64_t, const double*,
                                                                          const int32_t*, double*, int32_t);

}  // namespace plexus::transformer

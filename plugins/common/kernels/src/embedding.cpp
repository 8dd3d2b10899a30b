#include "plexus_kernels/embedding.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "parallel.hpp"

namespace plexus::kernels {

int64_t first_invalid_id(int64_t n, const int32_t* ids, int64_t vocab, bool allow_ignore, int32_t ignore) {
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (allow_ignore && id == ignore) continue;
    if (id < 0 || id >= vocab) return i;
  }
  return -1;
}

template <class T>
void embedding_forward(int64_t n, int64_t dim, const int32_t* ids, const T* weight, T* out) {
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n * dim))
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(static_cast<void*>(out + i * dim), weight + static_cast<int64_t>(ids[i]) * dim,
                static_cast<std::size_t>(dim) * sizeof(T));
}

template <class T>
void embedding_backward(int64_t n, int64_t dim, const int32_t* ids, const T* dout, T* dweight) {
  const int threads = detail::worth_parallel(n * dim) && !omp_in_parallel() ? omp_get_max_threads() : 1;
  // Each thread owns a slice of the columns (a multiple of 16 wide), for all tokens.
  int64_t slice = (dim + threads - 1) / threads;
  slice = (slice + 15) / 16 * 16;
#pragma omp parallel num_threads(threads)
  {
    const int64_t begin = std::min(dim, static_cast<int64_t>(omp_get_thread_num()) * slice);
    const int64_t end = std::min(dim, begin + slice);
    for (int64_t i = 0; i < n && begin < end; ++i) {
      T* row = dweight + static_cast<int64_t>(ids[i]) * dim;
      const T* g = dout + i * dim;
#pragma omp simd
      for (int64_t c = begin; c < end; ++c) row[c] += g[c];
    }
  }
}

template void embedding_forward<float>(int64_t, int64_t, const int32_t*, const float*, float*);
template void embedding_forward<double>(int64_t, int64_t, const int32_t*, const double*, double*);
template void embedding_backward<float>(int64_t, int64_t, const int32_t*, const float*, float*);
template void embedding_backward<double>(int64_t, int64_t, const int32_t*, const double*, double*);

}  // namespace plexus::kernels

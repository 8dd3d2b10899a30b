#include "plexus_kernels/rope.hpp"

#include <cmath>

#include "parallel.hpp"

namespace plexus::kernels {

template <class T>
void rope_tables(int64_t positions, int64_t head_dim, double base, T* cos_table, T* sin_table) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    for (int64_t p = 0; p < positions; ++p) {
      const double angle = static_cast<double>(p) * inv_freq;
      cos_table[p * half + i] = static_cast<T>(std::cos(angle));
      sin_table[p * half + i] = static_cast<T>(std::sin(angle));
    }
  }
}

template <class T>
void rope_apply(T* x, int64_t rows, int64_t seq, int64_t ld, const int64_t* cols, int64_t num_heads,
                int64_t head_dim, const T* cos_table, const T* sin_table, bool inverse) {
  const int64_t half = head_dim / 2;
  // The inverse rotation is the rotation by -angle: flip the sign of sin.
  const T sign = inverse ? T(-1) : T(1);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * num_heads * head_dim))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = r % seq;
    const T* cs = cos_table + pos * half;
    const T* sn = sin_table + pos * half;
    for (int64_t h = 0; h < num_heads; ++h) {
      T* v = x + r * ld + cols[h];
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const T a = v[i];
        const T b = v[i + half];
        const T s = sign * sn[i];
        v[i] = a * cs[i] - b * s;
        v[i + half] = b * cs[i] + a * s;
      }
    }
  }
}

#define PLEXUS_KERNELS_ROPE(T)                                                                           \
  template void rope_tables<T>(int64_t, int64_t, double, T*, T*);                                        \
  template void rope_apply<T>(T*, int64_t, int64_t, int64_t, const int64_t*, int64_t, int64_t, const T*, \
                              const T*, bool);
PLEXUS_KERNELS_ROPE(float)
PLEXUS_KERNELS_ROPE(double)
#undef PLEXUS_KERNELS_ROPE

}  // namespace plexus::kernels

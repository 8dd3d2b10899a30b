#include "plexus_kernels/activation.hpp"

#include <algorithm>

#include "plexus_kernels/fast_math.hpp"
#include "parallel.hpp"

namespace plexus::kernels {
namespace {

using detail::worth_parallel;

template <class T>
constexpr T kInvSqrt2 = T(0.70710678118654752440084436210484903928);
template <class T>
constexpr T kInvSqrt2Pi = T(0.39894228040143267793994605993438186848);

// Elements per parallel work item: big enough to amortize the call, small enough to balance.
constexpr int64_t kChunk = 4096;

// The loops over one contiguous range, one function per dtype and operation so the fp32 ones can
// be multiversioned (PLEXUS_KERNELS_SIMD_CLONES). always_inline: otherwise GCC keeps one
// out-of-line baseline copy that every clone calls, and the clones gain nothing.
template <class T>
[[gnu::always_inline]] inline void gelu_range(int64_t n, const T* x, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + detail::erf_fast<T>(x[i] * kInvSqrt2<T>));
}
template <class T>
[[gnu::always_inline]] inline void gelu_grad_range(int64_t n, const T* x, const T* dy, T* dx) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T cdf = T(0.5) * (T(1) + detail::erf_fast<T>(v * kInvSqrt2<T>));
    const T pdf = kInvSqrt2Pi<T> * detail::exp_fast<T>(T(-0.5) * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}
template <class T>
[[gnu::always_inline]] inline void swiglu_range(int64_t n, const T* gate, const T* up, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = gate[i] / (T(1) + detail::exp_fast<T>(-gate[i])) * up[i];
}
template <class T>
[[gnu::always_inline]] inline void swiglu_grad_range(int64_t n, const T* gate, const T* up, const T* g,
                                                     T* dgate, T* dup) {
  for (int64_t i = 0; i < n; ++i) {
    // 1 - sigmoid(x) as e * sigmoid(x) with e = exp(-x): no cancellation for large x.
    const T e = detail::exp_fast<T>(-gate[i]);
    const T s = T(1) / (T(1) + e);
    dup[i] = g[i] * (gate[i] * s);
    dgate[i] = g[i] * up[i] * s * (T(1) + gate[i] * (e * s));
  }
}

PLEXUS_KERNELS_SIMD_CLONES void gelu_f32(int64_t n, const float* x, float* y) {
  gelu_range(n, x, y);
}
PLEXUS_KERNELS_SIMD_CLONES void gelu_grad_f32(int64_t n, const float* x, const float* dy, float* dx) {
  gelu_grad_range(n, x, dy, dx);
}
PLEXUS_KERNELS_SIMD_CLONES void swiglu_f32(int64_t n, const float* gate, const float* up, float* y) {
  swiglu_range(n, gate, up, y);
}
PLEXUS_KERNELS_SIMD_CLONES void swiglu_grad_f32(int64_t n, const float* gate, const float* up, const float* g,
                                                float* dgate, float* dup) {
  swiglu_grad_range(n, gate, up, g, dgate, dup);
}

void gelu_any(int64_t n, const float* x, float* y) {
  gelu_f32(n, x, y);
}
void gelu_any(int64_t n, const double* x, double* y) {
  gelu_range(n, x, y);
}
void gelu_grad_any(int64_t n, const float* x, const float* dy, float* dx) {
  gelu_grad_f32(n, x, dy, dx);
}
void gelu_grad_any(int64_t n, const double* x, const double* dy, double* dx) {
  gelu_grad_range(n, x, dy, dx);
}
void swiglu_any(int64_t n, const float* gate, const float* up, float* y) {
  swiglu_f32(n, gate, up, y);
}
void swiglu_any(int64_t n, const double* gate, const double* up, double* y) {
  swiglu_range(n, gate, up, y);
}
void swiglu_grad_any(int64_t n, const float* gate, const float* up, const float* g, float* dgate,
                     float* dup) {
  swiglu_grad_f32(n, gate, up, g, dgate, dup);
}
void swiglu_grad_any(int64_t n, const double* gate, const double* up, const double* g, double* dgate,
                     double* dup) {
  swiglu_grad_range(n, gate, up, g, dgate, dup);
}

}  // namespace

template <class T>
void gelu_forward(int64_t n, const T* x, T* y) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t c = 0; c < chunks; ++c)
    gelu_any(std::min(kChunk, n - c * kChunk), x + c * kChunk, y + c * kChunk);
}

template <class T>
void gelu_backward(int64_t n, const T* x, const T* dy, T* dx) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (int64_t c = 0; c < chunks; ++c)
    gelu_grad_any(std::min(kChunk, n - c * kChunk), x + c * kChunk, dy + c * kChunk, dx + c * kChunk);
}

template <class T>
void swiglu_forward(int64_t rows, int64_t f, const T* a, T* y) {
#pragma omp parallel for schedule(static) if (worth_parallel(rows * f))
  for (int64_t r = 0; r < rows; ++r) swiglu_any(f, a + r * 2 * f, a + r * 2 * f + f, y + r * f);
}

template <class T>
void swiglu_backward(int64_t rows, int64_t f, const T* a, const T* dy, T* da) {
#pragma omp parallel for schedule(static) if (worth_parallel(rows * f))
  for (int64_t r = 0; r < rows; ++r)
    swiglu_grad_any(f, a + r * 2 * f, a + r * 2 * f + f, dy + r * f, da + r * 2 * f, da + r * 2 * f + f);
}

#define PLEXUS_KERNELS_ACTIVATION(T)                               \
  template void gelu_forward<T>(int64_t, const T*, T*);            \
  template void gelu_backward<T>(int64_t, const T*, const T*, T*); \
  template void swiglu_forward<T>(int64_t, int64_t, const T*, T*); \
  template void swiglu_backward<T>(int64_t, int64_t, const T*, const T*, T*);
PLEXUS_KERNELS_ACTIVATION(float)
PLEXUS_KERNELS_ACTIVATION(double)
#undef PLEXUS_KERNELS_ACTIVATION

}  // namespace plexus::kernels

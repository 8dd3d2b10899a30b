// plexus_kernels: scalar math written so that GCC vectorizes loops calling it (no libm calls, no
// branches, no out-of-line helpers: __builtin_bit_cast, not std::bit_cast, which GCC may leave as
// a call inside a multiversioned clone), for the fp32 paths. fp64 paths use the C library: they serve
// gradient checks, where exactness matters more than speed. Header-only: the kernels here and the
// plugins' own elementwise loops (plugins/mamba) use it.
#pragma once

#include <cmath>
#include <cstdint>

namespace plexus::kernels::detail {

// exp for float, Cephes' polynomial after range reduction by powers of two. Relative error below
// 1e-7 on [-87, 88]; inputs are clamped to that range (so results never overflow or turn
// subnormal; exp(-87) = 1.6e-38 stands for anything smaller). NaN stays NaN.
[[gnu::always_inline]] inline float exp_f32(float x) {
  x = x > 88.0f ? 88.0f : x;
  x = x < -87.0f ? -87.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float shifted = x * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  const int32_t ni = __builtin_bit_cast(int32_t, shifted) - __builtin_bit_cast(int32_t, kRound);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  return y * __builtin_bit_cast(float, (ni + 127) << 23);
}

// erf as a rational function of x (odd degree-13 over even degree-8 polynomial, the
// approximation Eigen uses for float), evaluated in double: absolute error below 7e-8 everywhere,
// i.e. about one float ulp. |x| >= 4 gives +-1.
[[gnu::always_inline]] inline float erf_f32(float xf) {
  double x = static_cast<double>(xf);
  x = x > 4.0 ? 4.0 : x;
  x = x < -4.0 ? -4.0 : x;
  const double x2 = x * x;
  double p = -2.72614225801306e-10;
  p = p * x2 + 2.77068142495902e-08;
  p = p * x2 - 2.10102402082508e-06;
  p = p * x2 - 5.69250639462346e-05;
  p = p * x2 - 7.34990630326855e-04;
  p = p * x2 - 2.95459980854025e-03;
  p = p * x2 - 1.60960333262415e-02;
  p = p * x;
  double q = -1.45660718464996e-05;
  q = q * x2 - 2.13374055278905e-04;
  q = q * x2 - 1.68282697438203e-03;
  q = q * x2 - 7.37332916720468e-03;
  q = q * x2 - 1.42647390514189e-02;
  return static_cast<float>(p / q);
}

template <class T>
inline T exp_fast(T x);
template <>
[[gnu::always_inline]] inline float exp_fast<float>(float x) {
  return exp_f32(x);
}
template <>
inline double exp_fast<double>(double x) {
  return std::exp(x);
}

template <class T>
inline T erf_fast(T x);
template <>
[[gnu::always_inline]] inline float erf_fast<float>(float x) {
  return erf_f32(x);
}
template <>
inline double erf_fast<double>(double x) {
  return std::erf(x);
}

}  // namespace plexus::kernels::detail

// Function multiversioning for the elementwise hot loops: the build targets baseline x86-64
// (SSE2), so these functions are also compiled for AVX2 and AVX-512 and the best one for the CPU
// is picked once at load time (an ifunc). The clones are chosen by CPU feature ("avx512f",
// "avx2"), not by model ("arch=haswell"): model checks fail on virtual CPUs that report a generic
// model (as here), and then the baseline clone would always run. The AVX2 and AVX-512 clones may
// fuse multiply-adds (FMA), so their results can differ from the baseline's in the last bit, as
// OpenBLAS's kernels do between CPUs.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PLEXUS_KERNELS_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PLEXUS_KERNELS_SIMD_CLONES
#endif

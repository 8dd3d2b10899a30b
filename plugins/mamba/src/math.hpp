// Scalar math for mamba.mixer's vectorized loops: float32 through plexus_kernels' vectorizable
// approximations (relative error < 1e-7), float64 through the C library.
#pragma once

#include <cmath>

#include "plexus_kernels/fast_math.hpp"

namespace plexus::mamba::detail {

template <class T>
[[gnu::always_inline]] inline T exp_t(T v) {
  return plexus::kernels::detail::exp_fast<T>(v);
}

// exp of a float64 argument, rounded to T first (the chunk decays: differences of float64 sums).
template <class T>
[[gnu::always_inline]] inline T exp_to(double v) {
  return exp_t<T>(static_cast<T>(v));
}

template <class T>
[[gnu::always_inline]] inline T sigmoid(T v) {
  return T(1) / (T(1) + exp_t<T>(-v));
}

// softplus as Mamba's kernels compute it: log(1 + exp(v)) for v <= 20, v above (the same
// threshold as torch.nn.functional.softplus); its derivative is sigmoid(v), and 1 above 20.
template <class T>
inline T softplus(T v) {
  return v > T(20) ? v : std::log1p(std::exp(v));
}
template <class T>
inline T softplus_grad(T v) {
  return v > T(20) ? T(1) : T(1) / (T(1) + std::exp(-v));
}

}  // namespace plexus::mamba::detail

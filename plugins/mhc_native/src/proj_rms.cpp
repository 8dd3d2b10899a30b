// proj_rms: per token, with v the n*C values of x (stream-major),
//   r = 1 / (sqrt(mean(v^2)) + eps)        (eps outside the square root)
//   p = v . phi                            (phi: [n*C, W])
// The norm is five eager passes (square, mean, sqrt, + eps, reciprocal); the projection is one
// GEMM. Backward recomputes the norm's intermediates rather than receiving them.
#include <cmath>
#include <vector>

#include "native.hpp"
#include "plexus_kernels/gemm.hpp"

namespace plexus::mhc_native {
namespace {

using kernels::Trans;

// The norm's steps for every token, kept because backward runs the chain rule through them.
template <class T>
struct RmsSteps {
  std::vector<T> rms;  // sqrt(mean(v^2))
  std::vector<T> r;    // 1 / (rms + eps)
};

template <class T>
RmsSteps<T> rms_steps(const T* x, int64_t tokens, int64_t row, double eps) {
  const auto count = static_cast<std::size_t>(tokens);
  const auto width = static_cast<std::size_t>(row);

  std::vector<T> squares(count * width);  // v^2
  for (std::size_t i = 0; i < squares.size(); ++i) squares[i] = x[i] * x[i];

  std::vector<T> mean(count);  // mean(v^2)
  for (std::size_t t = 0; t < count; ++t) {
    Acc sum = 0;
    for (std::size_t k = 0; k < width; ++k) sum += squares[t * width + k];
    mean[t] = static_cast<T>(sum / static_cast<Acc>(width));
  }

  RmsSteps<T> s;
  s.rms.resize(count);
  for (std::size_t t = 0; t < count; ++t) s.rms[t] = std::sqrt(mean[t]);

  std::vector<T> denominator(count);  // rms + eps
  for (std::size_t t = 0; t < count; ++t) denominator[t] = s.rms[t] + static_cast<T>(eps);

  s.r.resize(count);
  for (std::size_t t = 0; t < count; ++t) s.r[t] = T(1) / denominator[t];
  return s;
}

}  // namespace

template <class T>
void CpuPrimitives<T>::proj_rms_forward(const MhcProblem& p, const plx_mhc_proj_rms_forward_args& a) {
  if (p.tokens == 0) return;
  const int64_t row = p.streams * p.hidden;  // n*C values per token
  const T* x = mhc_in<T>(a.x);

  const RmsSteps<T> steps = rms_steps(x, p.tokens, row, p.eps);
  T* r = mhc_out<T>(a.r);
  for (std::size_t t = 0; t < steps.r.size(); ++t) r[t] = steps.r[t];

  // p[T, W] = x[T, n*C] . phi[n*C, W]
  kernels::gemm_parallel<T>(Trans::N, Trans::N, p.tokens, p.width, row, T(1), x, row, mhc_in<T>(a.phi),
                            p.width, T(0), mhc_out<T>(a.p), p.width);
}

template <class T>
void CpuPrimitives<T>::proj_rms_backward(const MhcProblem& p, const plx_mhc_proj_rms_backward_args& a) {
  if (p.tokens == 0) return;
  const int64_t row = p.streams * p.hidden;
  const T* x = mhc_in<T>(a.x);
  const T* dp = mhc_in<T>(a.dp);

  if (T* dphi = mhc_out_if<T>(a.dphi)) {
    // dphi[n*C, W] += x^T . dp
    kernels::gemm_parallel<T>(Trans::T, Trans::N, row, p.width, p.tokens, T(1), x, row, dp, p.width, T(1),
                              dphi, p.width);
  }

  T* dx = mhc_out_if<T>(a.dx);
  if (dx == nullptr) return;
  // Through the projection: dx[T, n*C] += dp . phi^T
  kernels::gemm_parallel<T>(Trans::N, Trans::T, p.tokens, row, p.width, T(1), dp, p.width, mhc_in<T>(a.phi),
                            p.width, T(1), dx, row);

  // Through the norm, step by step backwards: r = 1 / (rms + eps), rms = sqrt(mean),
  // mean = sum(v^2) / (n*C).
  const RmsSteps<T> steps = rms_steps(x, p.tokens, row, p.eps);
  const T* dr = mhc_in<T>(a.dr);
  const auto count = static_cast<std::size_t>(p.tokens);

  std::vector<T> d_rms(count);  // dr * d(1 / (rms + eps)) / d(rms) = -dr * r^2
  for (std::size_t t = 0; t < count; ++t) d_rms[t] = -dr[t] * steps.r[t] * steps.r[t];

  // d(sqrt(m)) / dm = 1 / (2 sqrt(m)) is infinite at m = 0, where the token's x is all zeros and
  // the product with d(mean)/dv = 0 is 0 * inf: that token's norm contributes zero (a
  // subgradient; eager autograd would produce NaN there).
  std::vector<T> d_mean(count);
  for (std::size_t t = 0; t < count; ++t)
    d_mean[t] = steps.rms[t] > T(0) ? d_rms[t] / (T(2) * steps.rms[t]) : T(0);

  // d(mean) / dv = 2 v / (n*C)
  const auto width = static_cast<std::size_t>(row);
  const T scale = T(2) / static_cast<T>(row);
  for (std::size_t t = 0; t < count; ++t)
    for (std::size_t k = 0; k < width; ++k) dx[t * width + k] += d_mean[t] * scale * x[t * width + k];
}

PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, proj_rms, float);
PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, proj_rms, double);

}  // namespace plexus::mhc_native

// proj_rms: per token, with v the n*C values of x (stream-major),
//   r = 1 / (sqrt(mean(v^2)) + eps)        p = v . phi
// Tokens go in blocks of about kBlockBytes of x, small enough to stay in the core's L2 cache,
// one thread per contiguous range of blocks. Per block, forward reads x from memory once: the
// sums of squares bring the block into cache and the block's product with phi (one GEMM of
// plexus_kernels on this thread) reads it from there. Backward likewise: dphi += x^T . dp for
// the block (reading x into cache), dx += dp . phi^T for the block (dx read and written once),
// then the norm's term added to dx from cache. dphi is summed per thread and combined in thread
// order (team.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "fused.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/gemm.hpp"
#include "plexus_kernels/threading.hpp"
#include "rows.hpp"
#include "simd.hpp"
#include "team.hpp"

namespace plexus::mhc_fused {
namespace {

using kernels::Trans;

// Bytes of x per block: a block, phi and (backward) dx's block fit in the 1-2 MiB L2 of a
// current server core. Measured at n*C = 2048 (2 threads): 4% faster than 256 KiB (the GEMMs
// run longer), about 20% faster than 128 KiB; 1 MiB slowed backward by 20%.
constexpr int64_t kBlockBytes = 512 * 1024;

// Tokens per block: kBlockBytes of x, but no more than a 1/kernels::kReductionParts share, so
// that few tokens still spread over the parts. A function of the shape alone: the blocks (and so
// the sums of dphi) do not depend on the thread count.
template <class T>
int64_t block_tokens(int64_t tokens, int64_t row) {
  const int64_t share = (tokens + kernels::kReductionParts - 1) / kernels::kReductionParts;
  return std::max<int64_t>(1, std::min(share, kBlockBytes / (row * static_cast<int64_t>(sizeof(T)))));
}

// The norm of one token, rounded step by step as the reference rounds it (the mean, then the
// square root, then + eps, then the reciprocal, each in T).
template <class T>
struct Norm {
  T rms;  // sqrt(mean(v^2))
  T r;    // 1 / (rms + eps)
};
template <class T>
PLEXUS_MHC_FUSED_INLINE Norm<T> norm_of(const T* v, int64_t length, double eps) {
  const T mean = static_cast<T>(sum_squares(v, length) / static_cast<Acc>(length));
  const T rms = std::sqrt(mean);
  return {rms, T(1) / (rms + static_cast<T>(eps))};
}

// r of `count` tokens of `row` values each.
template <class T>
PLEXUS_MHC_FUSED_INLINE void norms(const T* x, int64_t count, int64_t row, double eps, T* r) {
  for (int64_t t = 0; t < count; ++t) r[t] = norm_of(x + t * row, row, eps).r;
}

// The norm's part of dx for `count` tokens, with the reference's steps: d_rms = -dr r^2,
// d_mean = d_rms / (2 rms) (0 for an all-zero token, where d sqrt(m)/dm is infinite and dm/dv
// is 0), and dx += d_mean * 2/(n*C) * v.
template <class T>
PLEXUS_MHC_FUSED_INLINE void add_norm_gradient(const T* x, const T* dr, int64_t count, int64_t row,
                                               double eps, T* dx) {
  const T scale = T(2) / static_cast<T>(row);  // d(mean)/dv = 2 v / (n*C)
  for (int64_t t = 0; t < count; ++t) {
    const T* v = x + t * row;
    const Norm<T> norm = norm_of(v, row, eps);
    const T d_rms = -dr[t] * norm.r * norm.r;
    const T d_mean = norm.rms > T(0) ? d_rms / (T(2) * norm.rms) : T(0);
    const T coefficient = d_mean * scale;
    T* g = dx + t * row;
#pragma omp simd
    for (int64_t k = 0; k < row; ++k) g[k] += coefficient * v[k];
  }
}

PLEXUS_MHC_FUSED_CLONES void norms_f32(const float* x, int64_t count, int64_t row, double eps, float* r) {
  norms(x, count, row, eps, r);
}
PLEXUS_MHC_FUSED_CLONES void norms_f64(const double* x, int64_t count, int64_t row, double eps, double* r) {
  norms(x, count, row, eps, r);
}
PLEXUS_MHC_FUSED_CLONES void add_norm_gradient_f32(const float* x, const float* dr, int64_t count,
                                                   int64_t row, double eps, float* dx) {
  add_norm_gradient(x, dr, count, row, eps, dx);
}
PLEXUS_MHC_FUSED_CLONES void add_norm_gradient_f64(const double* x, const double* dr, int64_t count,
                                                   int64_t row, double eps, double* dx) {
  add_norm_gradient(x, dr, count, row, eps, dx);
}
void norms_any(const float* x, int64_t count, int64_t row, double eps, float* r) {
  norms_f32(x, count, row, eps, r);
}
void norms_any(const double* x, int64_t count, int64_t row, double eps, double* r) {
  norms_f64(x, count, row, eps, r);
}
void add_norm_gradient_any(const float* x, const float* dr, int64_t count, int64_t row, double eps,
                           float* dx) {
  add_norm_gradient_f32(x, dr, count, row, eps, dx);
}
void add_norm_gradient_any(const double* x, const double* dr, int64_t count, int64_t row, double eps,
                           double* dx) {
  add_norm_gradient_f64(x, dr, count, row, eps, dx);
}

}  // namespace

template <class T>
void CpuPrimitives<T>::proj_rms_forward(const MhcProblem& pb, const plx_mhc_proj_rms_forward_args& a) {
  if (pb.tokens == 0) return;
  const int64_t row = pb.streams * pb.hidden;  // n*C values per token
  const int64_t width = pb.width;
  const T* x = mhc_in<T>(a.x);
  const T* phi = mhc_in<T>(a.phi);
  T* p = mhc_out<T>(a.p);
  T* r = mhc_out<T>(a.r);

  const int64_t block = block_tokens<T>(pb.tokens, row);
  const int64_t blocks = (pb.tokens + block - 1) / block;
  const double work =
      static_cast<double>(pb.tokens) * static_cast<double>(row) * static_cast<double>(width + 1);
  run_parts(part_count(blocks, work), [&](int part, int parts) {
    const Range mine = part_range(blocks, part, parts);
    for (int64_t b = mine.begin; b < mine.end; ++b) {
      const int64_t t0 = b * block;
      const int64_t count = std::min(block, pb.tokens - t0);
      const T* xb = x + t0 * row;
      norms_any(xb, count, row, pb.eps, r + t0);
      // p[block] = x[block] . phi, reading the block from cache.
      kernels::gemm<T>(Trans::N, Trans::N, count, width, row, T(1), xb, row, phi, width, T(0), p + t0 * width,
                       width);
    }
  });
}

template <class T>
void CpuPrimitives<T>::proj_rms_backward(const MhcProblem& pb, const plx_mhc_proj_rms_backward_args& a) {
  T* dx = mhc_out_if<T>(a.dx);
  T* dphi = mhc_out_if<T>(a.dphi);
  if (pb.tokens == 0 || (dx == nullptr && dphi == nullptr)) return;
  const int64_t row = pb.streams * pb.hidden;
  const int64_t width = pb.width;
  const T* x = mhc_in<T>(a.x);
  const T* phi = mhc_in<T>(a.phi);
  const T* dp = mhc_in<T>(a.dp);
  const T* dr = mhc_in<T>(a.dr);

  const int64_t block = block_tokens<T>(pb.tokens, row);
  const int64_t blocks = (pb.tokens + block - 1) / block;
  const double products = (dx != nullptr ? 1.0 : 0.0) + (dphi != nullptr ? 1.0 : 0.0);
  const double work = static_cast<double>(pb.tokens) * static_cast<double>(row) *
                      (products * static_cast<double>(width) + 2.0);
  const int parts = part_count(blocks, work);

  // dphi: part 0 accumulates straight into dphi, every other part into its own partial sum,
  // added to dphi in part order afterwards.
  const auto phi_size = static_cast<std::size_t>(row * width);
  kernels::Buffer partials;
  T* partial_base = dphi != nullptr && parts > 1
                        ? partials.get<T>(phi_size * static_cast<std::size_t>(parts - 1))
                        : nullptr;

  run_parts(parts, [&](int part, int) {
    const Range mine = part_range(blocks, part, parts);
    T* my_dphi = dphi == nullptr ? nullptr : part == 0 ? dphi : partial_base + phi_size * (part - 1);
    if (my_dphi != nullptr && part != 0 && mine.begin == mine.end)
      std::memset(my_dphi, 0, phi_size * sizeof(T));
    for (int64_t b = mine.begin; b < mine.end; ++b) {
      const int64_t t0 = b * block;
      const int64_t count = std::min(block, pb.tokens - t0);
      const T* xb = x + t0 * row;
      const T* dpb = dp + t0 * width;
      if (my_dphi != nullptr) {  // dphi += x[block]^T . dp[block]; a partial starts at its first block
        const T beta = part != 0 && b == mine.begin ? T(0) : T(1);
        kernels::gemm<T>(Trans::T, Trans::N, row, width, count, T(1), xb, row, dpb, width, beta, my_dphi,
                         width);
      }
      if (dx == nullptr) continue;
      T* dxb = dx + t0 * row;
      // Through the projection: dx[block] += dp[block] . phi^T
      kernels::gemm<T>(Trans::N, Trans::T, count, row, width, T(1), dpb, width, phi, width, T(1), dxb, row);
      // Through the norm, from cache (the dphi product above brought the block of x in).
      add_norm_gradient_any(xb, dr + t0, count, row, pb.eps, dxb);
    }
  });

  if (dphi == nullptr) return;
  for (int part = 1; part < parts; ++part) {
    const T* src = partial_base + phi_size * static_cast<std::size_t>(part - 1);
#pragma omp simd
    for (std::size_t e = 0; e < phi_size; ++e) dphi[e] += src[e];
  }
}

PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, proj_rms, float);
PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, proj_rms, double);

}  // namespace plexus::mhc_fused

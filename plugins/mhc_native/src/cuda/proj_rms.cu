// proj_rms on CUDA, pass for pass as ../proj_rms.cpp: per token, with v the n*C values of x,
//   r = 1 / (sqrt(mean(v^2)) + eps)    (eps outside the square root)
//   p = v . phi
// The norm is five eager passes (square, mean, sqrt, + eps, reciprocal); the projection is one
// cuBLAS product (fp32, no TF32). Backward recomputes the norm's intermediates from x.
#include "passes.cuh"
#include "plexus_cuda_kernels/gemm.hpp"
#include "plexus_cuda_kernels/scratch_layout.hpp"
#include "primitives.hpp"

namespace plexus::mhc_native::gpu {
namespace {

using cuda_kernels::Trans;

struct Square {
  const float* x;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = x[i] * x[i]; }
};

struct MeanOfRow {  // mean[t] = sum_k squares[t, k] / width, summed in double
  const float* squares;
  int64_t width;
  float* mean;
  __device__ double term(int64_t t, int64_t k) const { return squares[t * width + k]; }
  __device__ void store(int64_t t, double sum) const {
    mean[t] = static_cast<float>(sum / static_cast<double>(width));
  }
};

struct Sqrt {
  const float* in;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = sqrtf(in[i]); }
};

struct AddEps {
  const float* in;
  float eps;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = in[i] + eps; }
};

struct Reciprocal {
  const float* in;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = 1.0f / in[i]; }
};

// The norm's steps for every token, as ../proj_rms.cpp keeps them.
struct RmsSteps {
  float* squares;      // [T, n*C] v^2
  float* mean;         // [T] mean(v^2)
  float* rms;          // [T] sqrt(mean)
  float* denominator;  // [T] rms + eps
  float* r;            // [T] 1 / (rms + eps)
};

RmsSteps take_rms_steps(cuda_kernels::ScratchLayout& w, int64_t tokens, int64_t row, float* r_output) {
  RmsSteps s{};
  s.squares = w.take<float>(tokens * row);
  s.mean = w.take<float>(tokens);
  s.rms = w.take<float>(tokens);
  s.denominator = w.take<float>(tokens);
  s.r = r_output != nullptr ? r_output : w.take<float>(tokens);
  return s;
}

void run_rms_steps(cudaStream_t stream, const float* x, int64_t tokens, int64_t row, double eps,
                   const RmsSteps& s) {
  for_each(stream, tokens * row, Square{x, s.squares}, "mhc_native proj_rms: square");
  row_sums(stream, tokens, row, MeanOfRow{s.squares, row, s.mean}, "mhc_native proj_rms: mean");
  for_each(stream, tokens, Sqrt{s.mean, s.rms}, "mhc_native proj_rms: sqrt");
  for_each(stream, tokens, AddEps{s.rms, static_cast<float>(eps), s.denominator}, "mhc_native proj_rms: + eps");
  for_each(stream, tokens, Reciprocal{s.denominator, s.r}, "mhc_native proj_rms: reciprocal");
}

struct DRms {  // dr * d(1 / (rms + eps)) / d(rms) = -dr * r^2
  const float* dr;
  const float* r;
  float* out;
  __device__ void operator()(int64_t t) const { out[t] = -dr[t] * r[t] * r[t]; }
};

// d(sqrt(m)) / dm = 1 / (2 sqrt(m)) is infinite at m = 0, where the token's x is all zeros and the
// product with d(mean)/dv = 0 is 0 * inf: that token's norm contributes zero (a subgradient).
struct DMean {
  const float* d_rms;
  const float* rms;
  float* out;
  __device__ void operator()(int64_t t) const { out[t] = rms[t] > 0.0f ? d_rms[t] / (2.0f * rms[t]) : 0.0f; }
};

struct AddNormGradient {  // dx[t, k] += d_mean[t] * (2 / (n*C)) * x[t, k]
  const float* d_mean;
  const float* x;
  int64_t row;
  float scale;
  float* dx;
  __device__ void operator()(int64_t i) const { dx[i] += d_mean[i / row] * scale * x[i]; }
};

}  // namespace

template <class A>
void CudaPrimitives<A>::proj_rms_forward(Handle& handle, const MhcProblem& p,
                                         const plx_mhc_proj_rms_forward_args& a) {
  if (p.tokens == 0) return;
  const int64_t row = p.streams * p.hidden;  // n*C values per token
  const float* x = mhc_in<float>(a.x);
  const RmsSteps steps = cuda_kernels::carve_scratch(handle, [&](cuda_kernels::ScratchLayout& w) {
    return take_rms_steps(w, p.tokens, row, mhc_out<float>(a.r));
  });
  run_rms_steps(handle.stream(), x, p.tokens, row, p.eps, steps);

  // p[T, W] = x[T, n*C] . phi[n*C, W]
  cuda_kernels::gemm<float, float>(handle, Trans::N, Trans::N, p.tokens, p.width, row, 1.0f, x, row,
                                   mhc_in<float>(a.phi), p.width, 0.0f, mhc_out<float>(a.p), p.width);
}

template <class A>
void CudaPrimitives<A>::proj_rms_backward(Handle& handle, const MhcProblem& p,
                                          const plx_mhc_proj_rms_backward_args& a) {
  if (p.tokens == 0) return;
  const int64_t row = p.streams * p.hidden;
  const float* x = mhc_in<float>(a.x);
  const float* dp = mhc_in<float>(a.dp);

  if (float* dphi = mhc_out_if<float>(a.dphi)) {
    // dphi[n*C, W] += x^T . dp
    cuda_kernels::gemm<float, float>(handle, Trans::T, Trans::N, row, p.width, p.tokens, 1.0f, x, row, dp,
                                     p.width, 1.0f, dphi, p.width);
  }

  float* dx = mhc_out_if<float>(a.dx);
  if (dx == nullptr) return;
  // Through the projection: dx[T, n*C] += dp . phi^T
  cuda_kernels::gemm<float, float>(handle, Trans::N, Trans::T, p.tokens, row, p.width, 1.0f, dp, p.width,
                                   mhc_in<float>(a.phi), p.width, 1.0f, dx, row);

  // Through the norm, step by step backwards.
  struct Temps {
    RmsSteps steps;
    float* d_rms;
    float* d_mean;
  };
  const Temps t = cuda_kernels::carve_scratch(handle, [&](cuda_kernels::ScratchLayout& w) {
    Temps temps{};
    temps.steps = take_rms_steps(w, p.tokens, row, nullptr);
    temps.d_rms = w.take<float>(p.tokens);
    temps.d_mean = w.take<float>(p.tokens);
    return temps;
  });
  cudaStream_t stream = handle.stream();
  run_rms_steps(stream, x, p.tokens, row, p.eps, t.steps);
  for_each(stream, p.tokens, DRms{mhc_in<float>(a.dr), t.steps.r, t.d_rms}, "mhc_native proj_rms': d rms");
  for_each(stream, p.tokens, DMean{t.d_rms, t.steps.rms, t.d_mean}, "mhc_native proj_rms': d mean");
  const float scale = 2.0f / static_cast<float>(row);  // d(mean) / dv = 2 v / (n*C)
  for_each(stream, p.tokens * row, AddNormGradient{t.d_mean, x, row, scale, dx}, "mhc_native proj_rms': dx");
}

PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, proj_rms, float, Handle&);

}  // namespace plexus::mhc_native::gpu

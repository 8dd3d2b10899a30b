// The engine's AdamW step on the GPU. Every operation is an explicitly rounded intrinsic
// (__fmul_rn, __fadd_rn, ...): nvcc would otherwise contract a * b + c into one fused multiply-add,
// which rounds once instead of twice and so differs from the CPU's result.
#include "device_common.cuh"
#include "plexus_cuda_kernels/adamw.hpp"

namespace plexus::cuda_kernels {
namespace {

using namespace detail;

__global__ void clip_factor_kernel(const double* sum_of_squares, double clip_grad, float* factor,
                                   double* norm) {
  const double value = sqrt(*sum_of_squares);  // IEEE square root, as std::sqrt
  const double clip = clip_grad > 0 && value > clip_grad ? clip_grad / (value + 1e-6) : 1.0;
  *factor = static_cast<float>(clip);
  if (norm != nullptr) *norm = value;
}

__global__ void adamw_kernel(int64_t n, float* w, const float* g, float* m, float* v, AdamWScalars s,
                             const float* clip) {
  const float fclip = clip != nullptr ? *clip : s.clip;
  const float one_minus_b1 = __fsub_rn(1.0f, s.beta1);
  const float one_minus_b2 = __fsub_rn(1.0f, s.beta2);
  for (int64_t k = global_thread(); k < n; k += grid_threads()) {
    const float gk = __fmul_rn(g[k], fclip);
    float wk = __fsub_rn(w[k], __fmul_rn(s.decay, w[k]));
    const float mk = __fadd_rn(__fmul_rn(s.beta1, m[k]), __fmul_rn(one_minus_b1, gk));
    const float vk = __fadd_rn(__fmul_rn(s.beta2, v[k]), __fmul_rn(__fmul_rn(one_minus_b2, gk), gk));
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vk), s.inv_sqrt_c2), s.eps);
    wk = __fsub_rn(wk, __fdiv_rn(__fmul_rn(s.step_size, mk), denom));
    m[k] = mk;
    v[k] = vk;
    w[k] = wk;
  }
}

}  // namespace

void clip_factor(const double* sum_of_squares, double clip_grad, float* factor, double* norm,
                 cudaStream_t stream) {
  clip_factor_kernel<<<1, 1, 0, stream>>>(sum_of_squares, clip_grad, factor, norm);
  check_launch("clip_factor");
}

void adamw_step(int64_t n, float* w, const float* g, float* m, float* v, const AdamWScalars& scalars,
                const float* clip, cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(n, w, g, m, v, scalars, clip);
  check_launch("adamw_step");
}

}  // namespace plexus::cuda_kernels

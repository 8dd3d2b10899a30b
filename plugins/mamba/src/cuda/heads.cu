// The per-head scalars: dt = softplus(dt_raw + dt_bias) forward and backward, A = -exp(A_log),
// and the per-head parameter gradients of A_log and D (kernels.hpp; dt.cpp and
// mixer_backward.cpp on the CPU).
#include "cuda/device.cuh"
#include "cuda/kernels.hpp"

namespace plexus::mamba::cuda {
namespace {

__global__ void dt_forward_kernel(int64_t rows, int64_t heads, const float* raw, int64_t ld_raw,
                                  const float* bias, float* dt) {
  for (int64_t i = global_thread(); i < rows * heads; i += grid_threads()) {
    const int64_t r = i / heads, h = i % heads;
    dt[i] = softplus(raw[r * ld_raw + h] + bias[h]);
  }
}

__global__ void dt_backward_kernel(int64_t rows, int64_t heads, const float* raw, int64_t ld_raw,
                                   const float* bias, const float* ddt, float* d_raw, int64_t ld_draw) {
  for (int64_t i = global_thread(); i < rows * heads; i += grid_threads()) {
    const int64_t r = i / heads, h = i % heads;
    d_raw[r * ld_draw + h] = ddt[i] * softplus_grad(raw[r * ld_raw + h] + bias[h]);
  }
}

__global__ void decay_rates_kernel(int64_t heads, const float* a_log, float* A) {
  for (int64_t h = global_thread(); h < heads; h += grid_threads()) A[h] = -expf(a_log[h]);
}

__global__ void head_grads_kernel(int64_t heads, const float* dA, const float* dD, const float* A,
                                  float* grad_a_log, float* grad_d) {
  for (int64_t h = global_thread(); h < heads; h += grid_threads()) {
    if (grad_d != nullptr) grad_d[h] += dD[h];
    if (grad_a_log != nullptr) grad_a_log[h] += dA[h] * A[h];  // dA/dA_log = A
  }
}

}  // namespace

void dt_forward(int64_t rows, int64_t heads, const float* raw, int64_t ld_raw, const float* bias, float* dt,
                cudaStream_t stream) {
  if (rows * heads == 0) return;
  dt_forward_kernel<<<blocks_for(rows * heads), kThreads, 0, stream>>>(rows, heads, raw, ld_raw, bias, dt);
  check_launch("mamba.mixer dt_forward");
}

void dt_backward(int64_t rows, int64_t heads, const float* raw, int64_t ld_raw, const float* bias,
                 const float* ddt, float* d_raw, int64_t ld_draw, cudaStream_t stream) {
  if (rows * heads == 0) return;
  dt_backward_kernel<<<blocks_for(rows * heads), kThreads, 0, stream>>>(rows, heads, raw, ld_raw, bias, ddt,
                                                                        d_raw, ld_draw);
  check_launch("mamba.mixer dt_backward");
}

void decay_rates(int64_t heads, const float* a_log, float* A, cudaStream_t stream) {
  if (heads == 0) return;
  decay_rates_kernel<<<blocks_for(heads), kThreads, 0, stream>>>(heads, a_log, A);
  check_launch("mamba.mixer decay_rates");
}

void add_head_grads(int64_t heads, const float* dA, const float* dD, const float* A, float* grad_a_log,
                    float* grad_d, cudaStream_t stream) {
  if (heads == 0 || (grad_a_log == nullptr && grad_d == nullptr)) return;
  head_grads_kernel<<<blocks_for(heads), kThreads, 0, stream>>>(heads, dA, dD, A, grad_a_log, grad_d);
  check_launch("mamba.mixer add_head_grads");
}

}  // namespace plexus::mamba::cuda

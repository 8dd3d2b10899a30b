// gelu and swiglu on the GPU, elementwise in fp32 with the CPU library's formulas. erff and expf
// are CUDA's accurate versions (a few ulp; no fast-math), the CPU uses approximations of similar
// accuracy.
#include "device_common.cuh"
#include "plexus_cuda_kernels/activation.hpp"

namespace plexus::cuda_kernels {
namespace {

using namespace detail;

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

template <class D>
__global__ void gelu_forward_kernel(int64_t n, const D* x, D* y) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = to_f32(x[i]);
    y[i] = from_f32<D>(0.5f * v * (1.0f + erff(v * kInvSqrt2)));
  }
}

template <class D>
__global__ void gelu_backward_kernel(int64_t n, const D* x, const D* dy, D* dx) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = to_f32(x[i]);
    const float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * exp_clamped(-0.5f * v * v);
    dx[i] = from_f32<D>(to_f32(dy[i]) * (cdf + v * pdf));
  }
}

template <class D>
__global__ void swiglu_forward_kernel(int64_t rows, int64_t f, const D* a, D* y) {
  for (int64_t i = global_thread(); i < rows * f; i += grid_threads()) {
    const int64_t r = i / f, c = i % f;
    const float gate = to_f32(a[r * 2 * f + c]);
    const float up = to_f32(a[r * 2 * f + f + c]);
    y[i] = from_f32<D>(gate / (1.0f + exp_clamped(-gate)) * up);
  }
}

template <class D>
__global__ void swiglu_backward_kernel(int64_t rows, int64_t f, const D* a, const D* dy, D* da) {
  for (int64_t i = global_thread(); i < rows * f; i += grid_threads()) {
    const int64_t r = i / f, c = i % f;
    const float gate = to_f32(a[r * 2 * f + c]);
    const float up = to_f32(a[r * 2 * f + f + c]);
    const float g = to_f32(dy[i]);
    // 1 - sigmoid(x) as e * sigmoid(x) with e = exp(-x): no cancellation for large x.
    const float e = exp_clamped(-gate);
    const float s = 1.0f / (1.0f + e);
    da[r * 2 * f + f + c] = from_f32<D>(g * (gate * s));
    da[r * 2 * f + c] = from_f32<D>(g * up * s * (1.0f + gate * (e * s)));
  }
}

}  // namespace

template <class T>
void gelu_forward(int64_t n, const T* x, T* y, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(n, dev(x), dev(y));
  check_launch("gelu_forward");
}

template <class T>
void gelu_backward(int64_t n, const T* x, const T* dy, T* dx, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(n, dev(x), dev(dy),
                                                                                  dev(dx));
  check_launch("gelu_backward");
}

template <class T>
void swiglu_forward(int64_t rows, int64_t f, const T* a, T* y, cudaStream_t stream) {
  if (rows == 0 || f == 0) return;
  swiglu_forward_kernel<<<elementwise_blocks(rows * f), kElementwiseThreads, 0, stream>>>(rows, f, dev(a),
                                                                                          dev(y));
  check_launch("swiglu_forward");
}

template <class T>
void swiglu_backward(int64_t rows, int64_t f, const T* a, const T* dy, T* da, cudaStream_t stream) {
  if (rows == 0 || f == 0) return;
  swiglu_backward_kernel<<<elementwise_blocks(rows * f), kElementwiseThreads, 0, stream>>>(rows, f, dev(a),
                                                                                           dev(dy), dev(da));
  check_launch("swiglu_backward");
}

#define PLEXUS_CUDA_KERNELS_ACTIVATION(T)                                        \
  template void gelu_forward<T>(int64_t, const T*, T*, cudaStream_t);            \
  template void gelu_backward<T>(int64_t, const T*, const T*, T*, cudaStream_t); \
  template void swiglu_forward<T>(int64_t, int64_t, const T*, T*, cudaStream_t); \
  template void swiglu_backward<T>(int64_t, int64_t, const T*, const T*, T*, cudaStream_t);
PLEXUS_CUDA_KERNELS_ACTIVATION(float)
PLEXUS_CUDA_KERNELS_ACTIVATION(bfloat16)
#undef PLEXUS_CUDA_KERNELS_ACTIVATION

}  // namespace plexus::cuda_kernels

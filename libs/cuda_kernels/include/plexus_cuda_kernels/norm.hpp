// plexus_cuda_kernels: row-wise RMSNorm and LayerNorm over the last dimension, forward and
// backward (plexus_kernels/norm.hpp on the GPU, same formulas):
//
// RMSNorm:   y = x / sqrt(mean(x^2) + eps) * w
// LayerNorm: y = (x - mean(x)) / sqrt(var(x) + eps) * w + b        (biased, two-pass variance)
//
// x, y, xhat, dy, dx: [rows, cols] activations (T = float or bfloat16); w, b, dw, db: [cols] fp32
// parameters and gradients; rstd: [rows] fp32. All arithmetic is fp32; bf16 values are rounded
// once when stored. Pointers documented "may be null" can be null.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "plexus_cuda_kernels/handle.hpp"

namespace plexus::cuda_kernels {

// Keeps xhat (the normalized row, before w and b) and rstd = 1 / sqrt(... + eps) per row; both
// may be null (inference). y may alias neither x nor xhat.
template <class T>
void rmsnorm_forward(int64_t rows, int64_t cols, const T* x, const float* w, float eps, T* y, T* xhat,
                     float* rstd, cudaStream_t stream);
template <class T>
void layernorm_forward(int64_t rows, int64_t cols, const T* x, const float* w, const float* b, float eps,
                       T* y, T* xhat, float* rstd, cudaStream_t stream);

// dx is written (may be null); dw and db are accumulated (+=) and may be null.
//   RMSNorm:   dx = rstd * (g - xhat * mean(g * xhat)),            g = dy * w
//   LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dw += sum_rows dy * xhat;  db += sum_rows dy.
// The column sums are deterministic: fixed blocks of rows (chosen from `rows` alone) give partial
// sums in scratch, added in block order.
template <class T>
void rmsnorm_backward(Handle& handle, int64_t rows, int64_t cols, const T* dy, const T* xhat,
                      const float* rstd, const float* w, T* dx, float* dw);
template <class T>
void layernorm_backward(Handle& handle, int64_t rows, int64_t cols, const T* dy, const T* xhat,
                        const float* rstd, const float* w, T* dx, float* dw, float* db);

// y = xhat * w (+ b when b is not null).
template <class T>
void norm_apply(int64_t rows, int64_t cols, const T* xhat, const float* w, const float* b, T* y,
                cudaStream_t stream);

}  // namespace plexus::cuda_kernels

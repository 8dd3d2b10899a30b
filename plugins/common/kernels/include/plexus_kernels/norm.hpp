// plexus_kernels: row-wise normalizations over the last dimension, forward and backward.
//
// RMSNorm:   y = x / sqrt(mean(x^2) + eps) * w
// LayerNorm: y = (x - mean(x)) / sqrt(var(x) + eps) * w + b        (biased variance)
//
// Forward keeps xhat (the normalized row, before w and b) and rstd (1 / sqrt(... + eps)) per row,
// which is all the backward needs. Pointers documented "may be null" can be null.
#pragma once

#include <cstdint>

namespace plexus::kernels {

// x, y: [rows, cols]; w (and b for LayerNorm): [cols]; xhat: [rows, cols]; rstd: [rows].
// xhat and rstd may be null (inference); y may alias neither x nor xhat.
template <class T>
void rmsnorm_forward(int64_t rows, int64_t cols, const T* x, const T* w, T eps, T* y, T* xhat, T* rstd);
template <class T>
void layernorm_forward(int64_t rows, int64_t cols, const T* x, const T* w, const T* b, T eps, T* y, T* xhat,
                       T* rstd);

// dy: [rows, cols]. dx is written (may be null: not needed); dw and db are accumulated (+=) and
// may be null. For RMSNorm:  dx = rstd * (g - xhat * mean(g * xhat)),  g = dy * w;
// for LayerNorm:             dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
// dw += sum_rows dy * xhat;  db += sum_rows dy.
template <class T>
void rmsnorm_backward(int64_t rows, int64_t cols, const T* dy, const T* xhat, const T* rstd, const T* w,
                      T* dx, T* dw);
template <class T>
void layernorm_backward(int64_t rows, int64_t cols, const T* dy, const T* xhat, const T* rstd, const T* w,
                        T* dx, T* dw, T* db);

// y = xhat * w (+ b when b is not null): re-derives a norm's output from what forward kept.
template <class T>
void norm_apply(int64_t rows, int64_t cols, const T* xhat, const T* w, const T* b, T* y);

}  // namespace plexus::kernels

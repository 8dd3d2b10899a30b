// plexus_cuda_kernels: MLP activations, forward and backward (plexus_kernels/activation.hpp on the
// GPU, same formulas, fp32 arithmetic, bf16 rounded once when stored):
//
// gelu (exact, erf form): y = 0.5 x (1 + erf(x / sqrt 2)),  y' = Phi(x) + x phi(x).
// swiglu on a [rows, 2F] input a (gate = a[:, :F], up = a[:, F:]): y = silu(gate) * up,
//   silu(g) = g * sigmoid(g),  silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))),
//   with 1 - sigmoid(g) formed as exp(-g) sigmoid(g) (no cancellation) and exp's argument clamped
//   to [-87, 88] as on the CPU (so very negative gates give 0, not inf * 0 = NaN).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace plexus::cuda_kernels {

template <class T>
void gelu_forward(int64_t n, const T* x, T* y, cudaStream_t stream);
// dx = dy * gelu'(x); dx may alias dy.
template <class T>
void gelu_backward(int64_t n, const T* x, const T* dy, T* dx, cudaStream_t stream);

// a: [rows, 2 * f]; y: [rows, f].
template <class T>
void swiglu_forward(int64_t rows, int64_t f, const T* a, T* y, cudaStream_t stream);
// dy: [rows, f]; da: [rows, 2 * f] (written).
template <class T>
void swiglu_backward(int64_t rows, int64_t f, const T* a, const T* dy, T* da, cudaStream_t stream);

}  // namespace plexus::cuda_kernels

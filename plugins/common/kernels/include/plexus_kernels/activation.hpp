// plexus_kernels: MLP activations, forward and backward.
//
// gelu (exact, erf form): y = 0.5 x (1 + erf(x / sqrt 2)),  y' = Phi(x) + x phi(x).
// swiglu on a [rows, 2F] input a (gate = a[:, :F], up = a[:, F:]): y = silu(gate) * up,
//   silu(g) = g * sigmoid(g),  silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
// fp64 uses the C library's erf/exp. fp32 uses vectorizable approximations accurate to a few ulp
// (a rational erf and a polynomial exp), so the loops run as SIMD.
#pragma once

#include <cstdint>

namespace plexus::kernels {

template <class T>
void gelu_forward(int64_t n, const T* x, T* y);
// dx = dy * gelu'(x); dx may alias dy.
template <class T>
void gelu_backward(int64_t n, const T* x, const T* dy, T* dx);

// a: [rows, 2 * f]; y: [rows, f].
template <class T>
void swiglu_forward(int64_t rows, int64_t f, const T* a, T* y);
// dy: [rows, f]; da: [rows, 2 * f] (written).
template <class T>
void swiglu_backward(int64_t rows, int64_t f, const T* a, const T* dy, T* da);

}  // namespace plexus::kernels

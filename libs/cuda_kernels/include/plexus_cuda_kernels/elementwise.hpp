// plexus_cuda_kernels: elementwise helpers for the engine and the layers (residual adds, gradient
// scaling, initialization, precision conversion). fp32 arithmetic; bf16 rounded once when stored,
// to nearest even. Each float result is one IEEE operation, so it equals the CPU's bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "plexus_cuda_kernels/types.hpp"

namespace plexus::cuda_kernels {

// x[i] = value (rounded to T).
template <class T>
void fill(int64_t n, T* x, float value, cudaStream_t stream);

// dst[i] = src[i] (an asynchronous device-to-device copy; the ranges must not overlap), for T =
// float, bfloat16 and int32_t.
template <class T>
void copy(int64_t n, const T* src, T* dst, cudaStream_t stream);

// dst[i] = src[i] converted (float -> bfloat16 rounds to nearest even; bfloat16 -> float is exact).
void convert(int64_t n, const float* src, bfloat16* dst, cudaStream_t stream);
void convert(int64_t n, const bfloat16* src, float* dst, cudaStream_t stream);

// y[i] += x[i], for (X, Y) = (float, float), (bfloat16, bfloat16) and (bfloat16, float): the last
// adds a bf16 activation gradient into an fp32 parameter gradient.
template <class X, class Y>
void add_into(int64_t n, const X* x, Y* y, cudaStream_t stream);

// x[i] *= alpha.
template <class T>
void scale(int64_t n, T* x, float alpha, cudaStream_t stream);

}  // namespace plexus::cuda_kernels

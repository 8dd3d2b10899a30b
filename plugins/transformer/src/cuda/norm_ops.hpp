// NormSpec (RMSNorm or LayerNorm, per the model) on the GPU: the pre-norms of attention and MLP and
// the final norm, over plexus_cuda_kernels' norms, for activations T = float or bfloat16 (x, y,
// xhat, dy, dx) with fp32 parameters, gradients and rstd. Same contract as NormSpec's CPU members:
// xhat and rstd may be null (no backward follows), dx may be null, dw/db accumulate.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.hpp"
#include "plexus_cuda_kernels/handle.hpp"
#include "plexus_cuda_kernels/types.hpp"

namespace plexus::transformer::cuda {

template <class T>
void norm_forward(const NormSpec& norm, int64_t rows, const T* x, const float* w, const float* b, T* y,
                  T* xhat, float* rstd, cudaStream_t stream);
template <class T>
void norm_backward(const NormSpec& norm, plexus::cuda_kernels::Handle& handle, int64_t rows, const T* dy,
                   const T* xhat, const float* rstd, const float* w, T* dx, float* dw, float* db);
// y = xhat * w (+ b): the norm's output again from what forward kept.
template <class T>
void norm_apply(const NormSpec& norm, int64_t rows, const T* xhat, const float* w, const float* b, T* y,
                cudaStream_t stream);

}  // namespace plexus::transformer::cuda

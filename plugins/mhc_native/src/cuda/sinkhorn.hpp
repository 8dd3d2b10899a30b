// Sinkhorn-Knopp on CUDA for a batch of n x n logit matrices, keeping every iterate so that
// backward can run the chain rule through the K unrolled iterations: ../sinkhorn.hpp's algorithm
// and storage, one kernel per eager operation of its loops:
//
//   M = exp(L - rowmax(L))
//   K times:  A <- A / max(row sums, eps)  (each row),  then  A <- A / max(column sums, eps)
//
// The row max is a constant; where a clamp is active (sum < eps) the denominator is the constant
// eps and the sum receives no gradient. The n-element sums run in double in the CPU's order, one
// thread per row or column, so the iterates equal the CPU's up to expf's last bits.
//
// The iterates live in the call's ScratchLayout: take() reserves them for batches of up to
// `max_batch` matrices (2K n x n matrices and 4K n-vectors per matrix, plus a few temporaries).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "plexus_cuda_kernels/scratch_layout.hpp"

namespace plexus::mhc_native::gpu {

class DeviceSinkhorn {
 public:
  DeviceSinkhorn(int64_t n, int32_t iterations, float eps, int64_t max_batch,
                 cuda_kernels::ScratchLayout& workspace);

  // logits: batch <= max_batch matrices, matrix b at logits + b * stride (rows contiguous, n
  // apart); out: [batch, n, n] contiguous. Keeps the iterates for backward().
  void forward(cudaStream_t stream, int64_t batch, const float* logits, int64_t stride, float* out);

  // The gradient of the last forward's logits from the gradient of its output: grad_out is
  // [batch, n, n] contiguous, grad_logits has the layout of forward's logits (written).
  void backward(cudaStream_t stream, const float* grad_out, float* grad_logits, int64_t stride) const;

 private:
  int64_t matrix_elements() const { return batch_ * n_ * n_; }
  int64_t vector_elements() const { return batch_ * n_; }

  int64_t n_;
  int32_t iterations_;
  float eps_;
  int64_t max_batch_;
  int64_t batch_ = 0;

  // Per forward: [max_batch, n] and [max_batch, n, n].
  float* row_max_;
  float* shifted_;  // L - rowmax
  float* exp_;      // M
  // Per iteration k (outer index), with the max_batch layout: [K, max_batch, n] and [K, max_batch, n, n].
  float* row_sums_;
  float* row_dens_;    // max(row sum, eps)
  float* after_rows_;  // A after the row division
  float* col_sums_;
  float* col_dens_;
  float* after_cols_;  // A after the column division (the output at k = K-1)
  // Backward's temporaries.
  float* grad_;  // the gradient of the current iterate, [max_batch, n, n]
  float* dot_;   // [max_batch, n]
  float* d_sum_;
};

}  // namespace plexus::mhc_native::gpu

// plexus_cuda_kernels: softmax cross-entropy over rows of logits, with an ignore index
// (plexus_kernels/cross_entropy.hpp on the GPU). The loss is the mean over counted tokens:
//   loss = sum over rows with target != ignore of (logsumexp(row) - row[target]) / count
// Each row is max-subtracted and reduced in fp32 (its loss formed in fp32, as on the CPU); the
// rows' losses are summed in double by a fixed-order tree (deterministic). Everything stays on the
// device: no synchronization.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "plexus_cuda_kernels/handle.hpp"

namespace plexus::cuda_kernels {

// Device pointers for the results; each may be null.
struct CrossEntropyOutputs {
  double* loss_sum = nullptr;  // sum over counted rows of logsumexp(row) - row[target]
  int64_t* count = nullptr;    // rows whose target is not `ignore`
  float* loss_mean = nullptr;  // loss_sum / count, or 0 when count == 0 (rounded from double)
};

// logits: [rows, vocab]; targets: [rows], valid or equal to `ignore` (ignored rows are not
// counted; a target outside [0, vocab) otherwise makes the row's loss NaN). When grad is not null
// it is written [rows, vocab] with softmax(row) - onehot(target) for counted rows and zeros for
// ignored ones (the CPU kernel's output: the caller scales by dL/dloss / count).
template <class T>
void cross_entropy_forward(Handle& handle, int64_t rows, int64_t vocab, const T* logits,
                           const int32_t* targets, int32_t ignore, CrossEntropyOutputs outputs, T* grad);

// The fused backward of the mean loss: dlogits = (dloss / count) * (softmax(row) - onehot(target)),
// recomputing the softmax from the logits; zero rows for ignored targets, and all zeros when
// count == 0 (the loss is then the constant 0). dloss (fp32, e.g. the engine's seed) and count (as
// written by cross_entropy_forward) are device scalars; the scale is formed in double and rounded
// to fp32 as the CPU head does. dlogits may alias logits.
template <class T>
void cross_entropy_backward(int64_t rows, int64_t vocab, const T* logits, const int32_t* targets,
                            int32_t ignore, const float* dloss, const int64_t* count, T* dlogits,
                            cudaStream_t stream);

}  // namespace plexus::cuda_kernels

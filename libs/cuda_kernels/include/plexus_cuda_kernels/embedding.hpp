// plexus_cuda_kernels: token embedding lookup and its gradient (plexus_kernels/embedding.hpp on
// the GPU). The weight and its gradient are fp32 parameters; the looked-up rows are activations
// (float or bfloat16).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "plexus_cuda_kernels/handle.hpp"

namespace plexus::cuda_kernels {

// *first_invalid (device) = the index of the first id outside [0, vocab) (ids equal to `ignore`
// are allowed when allow_ignore), or -1 when all are valid.
void first_invalid_id(int64_t n, const int32_t* ids, int64_t vocab, bool allow_ignore, int32_t ignore,
                      int64_t* first_invalid, cudaStream_t stream);

// out[i, :] = weight[ids[i], :] (rounded to T). out: [n, dim]; weight: [vocab, dim]. Ids must be
// valid; an invalid one reads nothing out of bounds and yields a row of NaN, so it cannot go
// unnoticed.
template <class T>
void embedding_forward(int64_t n, int64_t dim, int64_t vocab, const int32_t* ids, const float* weight, T* out,
                       cudaStream_t stream);

// dweight[ids[i], :] += dout[i, :] (accumulated in fp32; ids outside [0, vocab) are skipped).
// Deterministic and race-free without atomics: the token indices are stably sorted by id (CUB
// radix sort), and one thread block owns each distinct id, adding its tokens' rows in token order
// onto the existing gradient: the same additions in the same order as the CPU kernel, so fp32
// results are bitwise equal to it.
template <class T>
void embedding_backward(Handle& handle, int64_t n, int64_t dim, int64_t vocab, const int32_t* ids,
                        const T* dout, float* dweight);

}  // namespace plexus::cuda_kernels

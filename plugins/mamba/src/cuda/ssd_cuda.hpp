// The chunked SSD on the GPU, forward and backward: ssd.hpp's scan (the CPU's ssd_forward.cpp and
// ssd_backward.cpp) with the same decomposition and the same float64 cumulative decays. Every
// product of a chunk is one gemm_strided_batched over all chunks of all sequences, for one head
// (or, for C B^T and the gradients of B and C, one group) at a time; the steps between them are
// the kernels of kernels.hpp. Sequences that are not a multiple of the chunk are padded to whole
// chunks with zero rows (dt = 0: what the CPU's shorter last chunk computes).
#pragma once

#include <cstdint>

#include "cuda/call.hpp"
#include "ssd.hpp"

namespace plexus::mamba::cuda {

// The scan's inputs on the device: the convolution's output xbc [batch * seq, ld] with columns
// [x | B | C] (x: heads * head_dim, B and C: groups * state_dim each), dt [batch * seq, heads]
// (after softplus), A [heads] (negative) and D [heads] (the skip D x).
struct SsdTensors {
  const float* xbc = nullptr;
  int64_t ld = 0;
  const float* dt = nullptr;
  const float* A = nullptr;
  const float* D = nullptr;
};

// y [batch * seq, ld_y] = SSD + D x, written (head h in columns [h P, (h + 1) P)). states: the
// state entering every chunk, [heads, batch * chunks, head_dim, state_dim] (shape.states_size()
// floats; each sequence's first is zero), written; backward needs them.
void ssd_forward(const SsdShape& shape, const SsdTensors& in, float* y, int64_t ld_y, float* states,
                 Call& call);

// The gradients of sum(dy * y): dxbc [batch * seq, in.ld] (dx, dB, dC in the columns of x, B, C),
// ddt [batch * seq, heads], dA [heads], dD [heads]; all written.
void ssd_backward(const SsdShape& shape, const SsdTensors& in, const float* states, const float* dy,
                  int64_t ld_dy, float* dxbc, float* ddt, float* dA, float* dD, Call& call);

}  // namespace plexus::mamba::cuda

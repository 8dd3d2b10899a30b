// The chunked SSD scan of Mamba-2 on the CPU, forward and backward, in float32 and float64.
//
// Per head h (group g = h / (H / G)), with a_t = dt_t A_h and the state S_t of size [P, N]:
//   S_t = exp(a_t) S_{t-1} + dt_t x_t B_t^T,  S_0 = 0;   y_t = S_t C_t.
// Chunks of Q tokens (the last one may be shorter: it is handled at its length, as padding with
// dt = 0 would) split this into matrix products, with cs_l = a_1 + ... + a_l within a chunk:
//   within a chunk   y_l += sum_{s <= l} (C_l . B_s) exp(cs_l - cs_s) dt_s x_s
//   chunk states     the state leaving a chunk: exp(cs_last) S_in + sum_s exp(cs_last - cs_s) dt_s x_s B_s^T
//   state to output  y_l += exp(cs_l) S_in C_l
// The cumulative sums are kept in float64 whatever T, so exp(cs_l - cs_s) never loses digits to
// a difference of two large sums. Backward runs the same decomposition in reverse (the formulas
// are at the top of ssd_backward.cpp): O(L Q) work, every product through the BLAS, the chunks
// of every (batch, group) in parallel, only the passing of states from chunk to chunk sequential.
#pragma once

#include <algorithm>
#include <cstdint>

namespace plexus::mamba {

struct SsdShape {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, groups = 0, state_dim = 0, chunk = 0;

  int64_t chunks() const { return (seq + chunk - 1) / chunk; }
  int64_t chunk_len(int64_t c) const { return std::min(chunk, seq - c * chunk); }
  int64_t heads_per_group() const { return heads / groups; }
  // Elements of the states entering every chunk: [batch, heads, chunks, head_dim, state_dim].
  int64_t states_size() const { return batch * heads * chunks() * head_dim * state_dim; }
};

// The scan's inputs. x, B and C are column blocks of one [batch * seq, ld] buffer (the
// convolution's output): head h reads x columns [h P, (h + 1) P), group g reads B and C columns
// [g N, (g + 1) N). dt is [batch * seq, heads] (after softplus), A is [heads] (negative). D
// [heads], when given, adds the skip D x to y (and its gradient in backward), fused into the
// chunks' last pass over y as Mamba's kernels do.
template <class T>
struct SsdInputs {
  const T* x = nullptr;
  const T* B = nullptr;
  const T* C = nullptr;
  int64_t ld = 0;
  const T* dt = nullptr;
  const T* A = nullptr;
  const T* D = nullptr;
};

// y [batch * seq, ld_y]: head h's output in columns [h P, (h + 1) P), written. states: the
// state entering every chunk (the first is zero), written; backward needs them.
template <class T>
void ssd_forward(const SsdShape& shape, const SsdInputs<T>& in, T* y, int64_t ld_y, T* states);

// The gradients of sum(dy * y) for the y of ssd_forward (whose states are given): dx, dB and dC
// in the layout of x, B and C (columns of one [batch * seq, ld_d] buffer), ddt [batch * seq,
// heads], dA [heads] and, when in.D is given, dD [heads]; all written.
template <class T>
void ssd_backward(const SsdShape& shape, const SsdInputs<T>& in, const T* states, const T* dy, int64_t ld_dy,
                  T* dx, T* dB, T* dC, int64_t ld_d, T* ddt, T* dA, T* dD);

// Matrix-product FLOPs (2 per multiply-add) of one ssd_forward and one ssd_backward, as run
// (the diagonal blocks' products are full Q x Q products).
struct SsdFlops {
  double forward = 0, backward = 0;
};
SsdFlops ssd_flops(const SsdShape& shape);

}  // namespace plexus::mamba

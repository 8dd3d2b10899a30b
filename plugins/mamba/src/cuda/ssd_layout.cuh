// The padded chunk layout as the SSD kernels index it (kernels.hpp describes it): the sizes they
// read, passed by value to every launch, and the float64 cumulative decays of a row.
#pragma once

#include <cstdint>

#include "ssd.hpp"

namespace plexus::mamba::cuda {

struct ChunkDims {
  int64_t Q;       // tokens per chunk
  int64_t K;       // chunks of all sequences, batch * chunks
  int64_t rows;    // padded rows, K Q
  int64_t heads;   // H
  int64_t P, N;    // head_dim, state_dim
  int64_t PN;      // elements of one state
  int64_t chunks;  // per sequence
  int64_t seq;     // real tokens per sequence

  static ChunkDims of(const SsdShape& s) {
    ChunkDims d{};
    d.Q = s.chunk;
    d.chunks = s.chunks();
    d.K = s.batch * d.chunks;
    d.rows = d.K * d.Q;
    d.heads = s.heads;
    d.P = s.head_dim;
    d.N = s.state_dim;
    d.PN = d.P * d.N;
    d.seq = s.seq;
    return d;
  }
};

// cs of head h at padded row `row`, and at the last row of that row's chunk.
__device__ __forceinline__ double cs_at(const ChunkDims& d, const double* cs, int64_t h, int64_t row) {
  return cs[h * d.rows + row];
}
__device__ __forceinline__ double cs_last(const ChunkDims& d, const double* cs, int64_t h, int64_t row) {
  return cs[h * d.rows + (row / d.Q) * d.Q + d.Q - 1];
}

}  // namespace plexus::mamba::cuda

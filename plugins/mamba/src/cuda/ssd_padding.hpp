// Internal to ssd_forward_cuda.cpp and ssd_backward_cuda.cpp: the scan's sizes on the padded
// chunk layout (kernels.hpp), and its inputs on that layout: the caller's own buffers when every
// sequence is a whole number of chunks (then padded row k Q + l is token row k Q + l already),
// zero-padded copies otherwise.
#pragma once

#include <cstdint>

#include "cuda/call.hpp"
#include "cuda/kernels.hpp"
#include "cuda/ssd_cuda.hpp"
#include "ssd.hpp"

namespace plexus::mamba::cuda {

struct PaddedScan {
  int64_t Q = 0, K = 0, rows = 0;  // chunk, chunks of all sequences, padded rows K Q
  int64_t padded_seq = 0;          // tokens per padded sequence
  bool padded = false;             // whether seq is not a multiple of Q
  const float* xbc = nullptr;      // [rows, in.ld]
  const float* dt = nullptr;       // [rows, heads]

  // A [batch * seq, cols] buffer on this layout (a padded copy when `padded`, else `rows` itself).
  const float* pad(const SsdShape& s, const float* rows_in, int64_t ld, Call& call) const {
    if (!padded) return rows_in;
    float* copy = call.take(rows * ld);
    pack_rows(s.batch, s.seq, padded_seq, ld, rows_in, ld, copy, ld, call.stream);
    return copy;
  }

  static PaddedScan of(const SsdShape& s, const SsdTensors& in, Call& call) {
    PaddedScan p;
    p.Q = s.chunk;
    p.K = s.batch * s.chunks();
    p.rows = p.K * p.Q;
    p.padded_seq = s.chunks() * s.chunk;
    p.padded = p.padded_seq != s.seq;
    p.xbc = p.pad(s, in.xbc, in.ld, call);
    p.dt = p.pad(s, in.dt, s.heads, call);
    return p;
  }
};

}  // namespace plexus::mamba::cuda

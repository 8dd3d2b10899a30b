// Internal to the SSD scan (ssd_forward.cpp, ssd_backward.cpp): indexing of the saved states
// and of the work units, and the float64 cumulative decay of a chunk.
#pragma once

#include <cstdint>

#include "math.hpp"
#include "parallel.hpp"
#include "ssd.hpp"

namespace plexus::mamba::detail {

// The first element of the state entering chunk c of head h in batch element b.
inline int64_t state_offset(const SsdShape& s, int64_t b, int64_t h, int64_t c) {
  return ((b * s.heads + h) * s.chunks() + c) * s.head_dim * s.state_dim;
}

// One piece of the work: the chunk c of group g in batch element b (every head of the group).
struct Unit {
  int64_t b, g, c;
  int64_t row0;  // first token row of the chunk in [batch * seq]
  int64_t len;   // tokens in the chunk
};
inline int64_t unit_count(const SsdShape& s) {
  return s.batch * s.groups * s.chunks();
}
inline Unit unit_at(const SsdShape& s, int64_t u) {
  const int64_t nc = s.chunks();
  Unit w{};
  w.c = u % nc;
  w.g = (u / nc) % s.groups;
  w.b = u / (nc * s.groups);
  w.row0 = w.b * s.seq + w.c * s.chunk;
  w.len = s.chunk_len(w.c);
  return w;
}

// cs[l] = (dt_0 + ... + dt_l) A for the `len` tokens of a chunk; dt has row stride ld_dt.
template <class T>
void chunk_cumsum(int64_t len, const T* dt, int64_t ld_dt, T A, double* cs) {
  double sum = 0;
  for (int64_t l = 0; l < len; ++l) {
    sum += static_cast<double>(dt[l * ld_dt]) * static_cast<double>(A);
    cs[l] = sum;
  }
}

}  // namespace plexus::mamba::detail

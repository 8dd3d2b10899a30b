// plexus_kernels: rotary position embeddings, non-interleaved ("rotate half") over whole heads.
//
// For a head vector v of even length hd at position p, with h = hd / 2 and i in [0, h):
//   inv_freq_i = base^(-2i / hd),  angle = p * inv_freq_i
//   out[i]     = v[i] * cos(angle) - v[i + h] * sin(angle)
//   out[i + h] = v[i + h] * cos(angle) + v[i] * sin(angle)
// The backward applies the transposed (inverse) rotation to the gradient.
#pragma once

#include <cstdint>

namespace plexus::kernels {

// cos and sin tables [positions, hd / 2], computed in double and rounded to T.
template <class T>
void rope_tables(int64_t positions, int64_t head_dim, double base, T* cos_table, T* sin_table);

// Rotates, in place, heads of the rows of x: row r (of `rows`, each `ld` elements) is at position
// r % seq; in each row the heads start at columns cols[0..num_heads). inverse = true applies the
// inverse rotation (the backward of the forward rotation). Tables must cover `seq` positions.
template <class T>
void rope_apply(T* x, int64_t rows, int64_t seq, int64_t ld, const int64_t* cols, int64_t num_heads,
                int64_t head_dim, const T* cos_table, const T* sin_table, bool inverse);

}  // namespace plexus::kernels

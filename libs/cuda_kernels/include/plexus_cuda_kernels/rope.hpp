// plexus_cuda_kernels: rotary position embeddings, non-interleaved ("rotate half") over whole heads
// (plexus_kernels/rope.hpp on the GPU). For a head vector v of even length hd at position p, with
// h = hd / 2 and i in [0, h):
//   inv_freq_i = base^(-2i / hd),  angle = p * inv_freq_i
//   out[i]     = v[i] * cos(angle) - v[i + h] * sin(angle)
//   out[i + h] = v[i + h] * cos(angle) + v[i] * sin(angle)
// The backward applies the inverse rotation (by -angle) to the gradient.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace plexus::cuda_kernels {

// cos and sin tables [positions, head_dim / 2] in fp32, computed in double on the device and
// rounded (the CPU tables are computed the same way; the two agree to one fp32 ulp).
void rope_tables(int64_t positions, int64_t head_dim, double base, float* cos_table, float* sin_table,
                 cudaStream_t stream);

// Rotates, in place, heads of the rows of x: row r (of `rows`, each `ld` elements) is at position
// r % seq; in each row the heads start at columns cols[0..num_heads), a HOST array (copied into the
// launch, any length). inverse = true applies the inverse rotation. Tables must cover `seq`
// positions. Arithmetic in fp32; bf16 rounded once per element.
template <class T>
void rope_apply(T* x, int64_t rows, int64_t seq, int64_t ld, const int64_t* cols, int64_t num_heads,
                int64_t head_dim, const float* cos_table, const float* sin_table, bool inverse,
                cudaStream_t stream);

}  // namespace plexus::cuda_kernels

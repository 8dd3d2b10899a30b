// The chunked SSD scan, forward (ssd.hpp): chunk states, the passing of states from chunk to
// chunk, then every chunk's output.
#include <omp.h>

#include <cstring>
#include <vector>

#include "plexus_kernels/gemm.hpp"
#include "ssd.hpp"
#include "ssd_common.hpp"

namespace plexus::mamba {
namespace {

namespace k = plexus::kernels;
using detail::exp_to;
using detail::Unit;
using k::Trans;

// Mt[s][l] = CBt[s][l] exp(cs_l - cs_s) dt_s for l >= s and 0 for l < s: the transposed matrix
// of a chunk's within-chunk output, y_l = sum_s Mt[s][l] x_s. Row stride len.
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void masked_decay(int64_t len, const double* cs, const T* dt, int64_t ld_dt,
                                             const T* cbt, T* mt) {
  for (int64_t s = 0; s < len; ++s) {
    T* row = mt + s * len;
    const T* cb = cbt + s * len;
    const double base = cs[s];
    const T scale = dt[s * ld_dt];
    for (int64_t l = 0; l < s; ++l) row[l] = T(0);
    for (int64_t l = s; l < len; ++l) row[l] = cb[l] * exp_to<T>(cs[l] - base) * scale;
  }
}

// y[l][:] += D x[l][:] for a head's block of rows.
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void add_skip(int64_t rows, int64_t cols, T D, const T* x, int64_t ld_x, T* y,
                                         int64_t ld_y) {
  for (int64_t l = 0; l < rows; ++l)
    for (int64_t c = 0; c < cols; ++c) y[l * ld_y + c] += D * x[l * ld_x + c];
}

// dst[s][:] = factor[s] * src[s][:] for `rows` rows of `cols` values.
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void scale_rows(int64_t rows, int64_t cols, const T* factor, const T* src,
                                           int64_t ld_src, T* dst, int64_t ld_dst) {
  for (int64_t s = 0; s < rows; ++s) {
    const T f = factor[s];
    const T* in = src + s * ld_src;
    T* out = dst + s * ld_dst;
    for (int64_t j = 0; j < cols; ++j) out[j] = f * in[j];
  }
}

// 1. The state each chunk ends with when it starts from zero, sum_s exp(cs_last - cs_s) dt_s
//    x_s B_s^T, into the slot of the next chunk (the last chunk's is not needed: no final state
//    is returned); and exp(cs_last), the decay of a state across the chunk.
template <class T>
void chunk_states(const SsdShape& s, const SsdInputs<T>& in, const Unit& u, double* cs, T* factor, T* bw,
                  T* states, T* chunk_decay) {
  const int64_t P = s.head_dim, N = s.state_dim, q = u.len;
  const T* B = in.B + u.row0 * in.ld + u.g * N;
  for (int64_t j = 0; j < s.heads_per_group(); ++j) {
    const int64_t h = u.g * s.heads_per_group() + j;
    const T* dt = in.dt + u.row0 * s.heads + h;
    detail::chunk_cumsum(q, dt, s.heads, in.A[h], cs);
    chunk_decay[(u.b * s.heads + h) * s.chunks() + u.c] = exp_to<T>(cs[q - 1]);
    if (u.c + 1 == s.chunks()) continue;
    for (int64_t l = 0; l < q; ++l) factor[l] = exp_to<T>(cs[q - 1] - cs[l]) * dt[l * s.heads];
    scale_rows(q, N, factor, B, in.ld, bw, N);
    k::gemm<T>(Trans::T, Trans::N, P, N, q, T(1), in.x + u.row0 * in.ld + h * P, in.ld, bw, N, T(0),
               states + detail::state_offset(s, u.b, h, u.c + 1), N);
  }
}

// 3. A chunk's output: exp(cs_l) S_in C_l, then the within-chunk part, then D x.
template <class T>
void chunk_output(const SsdShape& s, const SsdInputs<T>& in, const T* states, const Unit& u, double* cs,
                  T* cbt, T* mt, T* factor, T* y, int64_t ld_y) {
  const int64_t P = s.head_dim, N = s.state_dim, q = u.len;
  const T* B = in.B + u.row0 * in.ld + u.g * N;
  const T* C = in.C + u.row0 * in.ld + u.g * N;
  k::gemm<T>(Trans::N, Trans::T, q, q, N, T(1), B, in.ld, C, in.ld, T(0), cbt, q);  // CBt[s][l] = B_s . C_l
  for (int64_t j = 0; j < s.heads_per_group(); ++j) {
    const int64_t h = u.g * s.heads_per_group() + j;
    const T* dt = in.dt + u.row0 * s.heads + h;
    T* yh = y + u.row0 * ld_y + h * P;
    detail::chunk_cumsum(q, dt, s.heads, in.A[h], cs);
    T beta = T(0);
    if (u.c > 0) {
      k::gemm<T>(Trans::N, Trans::T, q, P, N, T(1), C, in.ld, states + detail::state_offset(s, u.b, h, u.c),
                 N, T(0), yh, ld_y);
      for (int64_t l = 0; l < q; ++l) factor[l] = exp_to<T>(cs[l]);
      scale_rows(q, P, factor, yh, ld_y, yh, ld_y);
      beta = T(1);
    }
    masked_decay(q, cs, dt, s.heads, cbt, mt);
    const T* xh = in.x + u.row0 * in.ld + h * P;
    k::gemm<T>(Trans::T, Trans::N, q, P, q, T(1), mt, q, xh, in.ld, beta, yh, ld_y);
    if (in.D != nullptr) add_skip(q, P, in.D[h], xh, in.ld, yh, ld_y);
  }
}

}  // namespace

template <class T>
void ssd_forward(const SsdShape& s, const SsdInputs<T>& in, T* y, int64_t ld_y, T* states) {
  const int64_t nc = s.chunks(), q = std::min(s.chunk, s.seq), P = s.head_dim, N = s.state_dim;
  const int64_t units = detail::unit_count(s), pn = P * N;
  if (units == 0) return;
  const bool parallel = units > 1 && detail::worth_parallel(s.batch * s.seq * s.heads * pn);
  std::vector<T> chunk_decay(static_cast<std::size_t>(s.batch * s.heads * nc));
  detail::PerThread<double> cs_scratch(static_cast<std::size_t>(q));
  detail::PerThread<T> scratch(static_cast<std::size_t>(2 * q * q + q * N + q));

#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t i = 0; i < units; ++i) {
    T* work = scratch.mine();
    chunk_states(s, in, detail::unit_at(s, i), cs_scratch.mine(), work, work + q, states, chunk_decay.data());
  }

  // 2. The states entering each chunk: S_0 = 0, S_{c+1} = exp(cs_last of c) S_c + (chunk c's own).
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    T* st = states + bh * nc * pn;
    std::memset(static_cast<void*>(st), 0, static_cast<std::size_t>(pn) * sizeof(T));
    for (int64_t c = 1; c < nc; ++c) {
      const T decay = chunk_decay[static_cast<std::size_t>(bh * nc + c - 1)];
      T* cur = st + c * pn;
      const T* prev = cur - pn;
      for (int64_t e = 0; e < pn; ++e) cur[e] += decay * prev[e];
    }
  }

#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t i = 0; i < units; ++i) {
    T* work = scratch.mine();
    chunk_output(s, in, states, detail::unit_at(s, i), cs_scratch.mine(), work, work + q * q,
                 work + 2 * q * q, y, ld_y);
  }
}

template void ssd_forward<float>(const SsdShape&, const SsdInputs<float>&, float*, int64_t, float*);
template void ssd_forward<double>(const SsdShape&, const SsdInputs<double>&, double*, int64_t, double*);

}  // namespace plexus::mamba

// The chunked SSD scan, backward (ssd.hpp). Per chunk and head, with w_s = exp(cs_last - cs_s),
// dS the gradient of the state leaving the chunk (zero for the last chunk), S_in the state entering
// it, and dCB[l, s] = (dY_l . x_s) exp(cs_l - cs_s) dt_s for s <= l:
//   dS of the chunk before = exp(cs_last) dS + sum_l exp(cs_l) dY_l C_l^T        (passed back)
//   dx_s = sum_{l >= s} (C_l . B_s) exp(cs_l - cs_s) dt_s dY_l + w_s dt_s dS B_s
//   dB_s = sum_{l >= s} dCB[l, s] C_l + w_s dt_s dS^T x_s
//   dC_l = sum_{s <= l} dCB[l, s] B_s + exp(cs_l) S_in^T dY_l
//   da_k = sum over the pairs s < k <= l of (dY_l . x_s) (C_l . B_s) exp(cs_l - cs_s) dt_s
//        + sum_{l >= k} exp(cs_l) C_l . (S_in^T dY_l)
//        + sum_{s < k} w_s dt_s x_s . (dS B_s) + exp(cs_last) <dS, S_in>
//   ddt_k = A da_k + (dt_k's terms through dt_k x_k);   dA = sum_k dt_k da_k
// Each da_k is accumulated as a sum over the pairs (or tokens) whose decay spans token k, never as
// the difference of two cumulative sums, so nothing cancels.
#include <omp.h>

#include <cstring>
#include <vector>

#include "plexus_kernels/gemm.hpp"
#include "ssd.hpp"
#include "ssd_common.hpp"
#include "workspace.hpp"

namespace plexus::mamba {
namespace {

namespace k = plexus::kernels;
using detail::exp_to;
using detail::Unit;
using k::Trans;

// The within-chunk terms of one head, element by element over l >= s (rows s, row stride len):
//   in:  cbt[s][l] = B_s . C_l,  dmt[s][l] = x_s . dY_l
//   out: mt[s][l] = cbt exp(cs_l - cs_s) dt_s (0 for l < s), the transposed within-chunk matrix;
//        dcbt[s][l] (+)= dmt exp(cs_l - cs_s) dt_s, the gradient of B_s . C_l: written for the
//        first head of the group (0 for l < s), added for the others;
//        dmt[s][l] <- dmt mt, the term T[s][l] of da (0 for l < s);
//        ddt[s] = sum_l dmt cbt exp(cs_l - cs_s), dt_s's direct gradient through its x_s.
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void within_chunk_terms(int64_t len, const double* cs, const T* dt, int64_t ld_dt,
                                                   const T* cbt, T* dmt, T* mt, T* dcbt, bool first, T* ddt) {
  for (int64_t s = 0; s < len; ++s) {
    const double base = cs[s];
    const T scale = dt[s * ld_dt];
    const T* cb = cbt + s * len;
    T* dm = dmt + s * len;
    T* m = mt + s * len;
    T* dcb = dcbt + s * len;
    for (int64_t l = 0; l < s; ++l) m[l] = dm[l] = T(0);
    if (first)
      for (int64_t l = 0; l < s; ++l) dcb[l] = T(0);
    T row = T(0);
#pragma omp simd reduction(+ : row)
    for (int64_t l = s; l < len; ++l) {
      const T decay = exp_to<T>(cs[l] - base);
      const T e = dm[l] * cb[l] * decay;
      const T g = dm[l] * decay * scale;
      row += e;
      dcb[l] = first ? g : dcb[l] + g;
      m[l] = cb[l] * decay * scale;
      dm[l] = e * scale;
    }
    ddt[s] = row;
  }
}

// da[k] = sum over s < k <= l of t[s][l] (rows s, row stride len): acc[l] holds sum_{s < k}
// t[s][l] for the l >= k still needed.
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void spanning_sums(int64_t len, const T* t, T* acc, T* da) {
  for (int64_t l = 0; l < len; ++l) acc[l] = T(0);
  da[0] = T(0);
  for (int64_t kk = 1; kk < len; ++kk) {
    const T* row = t + (kk - 1) * len;
    T sum = T(0);
#pragma omp simd reduction(+ : sum)
    for (int64_t l = kk; l < len; ++l) {
      acc[l] += row[l];
      sum += acc[l];
    }
    da[kk] = sum;
  }
}

// a[l][:] *= factor[l]; dots[l] = a[l] . other[l]; sink[l][:] += sink_factor[l] a[l] (sink_factor
// null: 1).
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void scale_dot_add(int64_t rows, int64_t cols, const T* factor, T* a, int64_t ld_a,
                                              const T* other, int64_t ld_other, T* dots, const T* sink_factor,
                                              T* sink, int64_t ld_sink) {
  for (int64_t l = 0; l < rows; ++l) {
    T* row = a + l * ld_a;
    const T* o = other + l * ld_other;
    T* dst = sink + l * ld_sink;
    const T f = factor[l], g = sink_factor != nullptr ? sink_factor[l] : T(1);
    T dot = T(0);
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < cols; ++j) {
      row[j] *= f;
      dot += row[j] * o[j];
      dst[j] += g * row[j];
    }
    dots[l] = dot;
  }
}

// dst[s][:] = factor[s] * src[s][:].
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

template <class T>
void zero_rows(int64_t rows, int64_t cols, T* a, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    std::memset(static_cast<void*>(a + r * ld), 0, static_cast<std::size_t>(cols) * sizeof(T));
}

// dx += D dy over a head's block of rows; returns sum(x dy), the block's share of dD.
template <class T>
PLEXUS_KERNELS_SIMD_CLONES T add_skip_grad(int64_t rows, int64_t cols, T D, const T* x, int64_t ld_x,
                                           const T* dy, int64_t ld_dy, T* dx, int64_t ld_dx) {
  T sum = T(0);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * ld_x;
    const T* dyr = dy + r * ld_dy;
    T* dxr = dx + r * ld_dx;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) {
      sum += xr[c] * dyr[c];
      dxr[c] += D * dyr[c];
    }
  }
  return sum;
}

// Per-thread scratch of a chunk's backward, carved from one T buffer and one double buffer.
template <class T>
struct Work {
  T *cbt, *dcbt, *dmt, *mt, *qn, *bs, *factor, *wdt, *dts, *ddt, *da, *acc, *dots;
  double* cs;
  static std::size_t size(int64_t q, int64_t n) {
    return static_cast<std::size_t>(4 * q * q + 2 * q * n + 7 * q);
  }
  Work(T* t, double* d, int64_t q, int64_t n)
      : cbt(t),
        dcbt(cbt + q * q),
        dmt(dcbt + q * q),
        mt(dmt + q * q),
        qn(mt + q * q),
        bs(qn + q * n),
        factor(bs + q * n),
        wdt(factor + q),
        dts(wdt + q),
        ddt(dts + q),
        da(ddt + q),
        acc(da + q),
        dots(acc + q),
        cs(d) {}
};

// B1. dS_{c-1} (local part) = sum_l exp(cs_l) dY_l C_l^T, and exp(cs_last), for chunks c >= 1.
template <class T>
void chunk_state_grads(const SsdShape& s, const SsdInputs<T>& in, const T* dy, int64_t ld_dy, const Unit& u,
                       double* cs, T* factor, T* dys, T* dleave, T* chunk_decay) {
  const int64_t P = s.head_dim, N = s.state_dim, q = u.len;
  const T* C = in.C + u.row0 * in.ld + u.g * N;
  for (int64_t j = 0; j < s.heads_per_group(); ++j) {
    const int64_t h = u.g * s.heads_per_group() + j;
    detail::chunk_cumsum(q, in.dt + u.row0 * s.heads + h, s.heads, in.A[h], cs);
    chunk_decay[(u.b * s.heads + h) * s.chunks() + u.c] = exp_to<T>(cs[q - 1]);
    if (u.c == 0) continue;
    for (int64_t l = 0; l < q; ++l) factor[l] = exp_to<T>(cs[l]);
    scale_rows(q, P, factor, dy + u.row0 * ld_dy + h * P, ld_dy, dys, P);
    k::gemm<T>(Trans::T, Trans::N, P, N, q, T(1), dys, P, C, in.ld, T(0),
               dleave + detail::state_offset(s, u.b, h, u.c - 1), N);
  }
}

// B3. Everything else of one chunk, every head of its group. The skip D x's gradient is added to
// dx here (dx += D dy; dD's share in dd_sums), as Mamba's own kernels do.
template <class T>
void chunk_backward(const SsdShape& s, const SsdInputs<T>& in, const T* states, const T* dleave, const T* dy,
                    int64_t ld_dy, const Unit& u, Work<T>& w, T* dx, T* dB, T* dC, int64_t ld_d, T* ddt,
                    T* da_sums, T* dd_sums) {
  const int64_t P = s.head_dim, N = s.state_dim, q = u.len, H = s.heads;
  const bool has_in = u.c > 0, has_out = u.c + 1 < s.chunks();
  const T* Bg = in.B + u.row0 * in.ld + u.g * N;
  const T* Cg = in.C + u.row0 * in.ld + u.g * N;
  T* dBg = dB + u.row0 * ld_d + u.g * N;
  T* dCg = dC + u.row0 * ld_d + u.g * N;
  zero_rows(q, N, dBg, ld_d);
  zero_rows(q, N, dCg, ld_d);
  k::gemm<T>(Trans::N, Trans::T, q, q, N, T(1), Bg, in.ld, Cg, in.ld, T(0), w.cbt, q);

  for (int64_t j = 0; j < s.heads_per_group(); ++j) {
    const int64_t h = u.g * s.heads_per_group() + j;
    const T* dt = in.dt + u.row0 * H + h;
    const T A = in.A[h];
    const T* xh = in.x + u.row0 * in.ld + h * P;
    const T* dyh = dy + u.row0 * ld_dy + h * P;
    T* dxh = dx + u.row0 * ld_d + h * P;
    detail::chunk_cumsum(q, dt, H, A, w.cs);

    // Within the chunk.
    k::gemm<T>(Trans::N, Trans::T, q, q, P, T(1), xh, in.ld, dyh, ld_dy, T(0), w.dmt, q);
    within_chunk_terms(q, w.cs, dt, H, w.cbt, w.dmt, w.mt, w.dcbt, j == 0, w.ddt);
    k::gemm<T>(Trans::N, Trans::N, q, P, q, T(1), w.mt, q, dyh, ld_dy, T(0), dxh, ld_d);
    spanning_sums(q, w.dmt, w.acc, w.da);

    const T* s_in = states + detail::state_offset(s, u.b, h, u.c);
    if (has_in) {  // state to output
      k::gemm<T>(Trans::N, Trans::N, q, N, P, T(1), dyh, ld_dy, s_in, N, T(0), w.qn, N);
      for (int64_t l = 0; l < q; ++l) w.factor[l] = exp_to<T>(w.cs[l]);
      scale_dot_add(q, N, w.factor, w.qn, N, Cg, in.ld, w.dots, static_cast<const T*>(nullptr), dCg, ld_d);
      T run = T(0);
      for (int64_t kk = q - 1; kk >= 0; --kk) {
        run += w.dots[kk];
        w.da[kk] += run;
      }
    }
    if (has_out) {  // the chunk's state
      const T* ds = dleave + detail::state_offset(s, u.b, h, u.c);
      k::gemm<T>(Trans::N, Trans::N, q, N, P, T(1), xh, in.ld, ds, N, T(0), w.qn, N);
      for (int64_t l = 0; l < q; ++l) {
        w.factor[l] = exp_to<T>(w.cs[q - 1] - w.cs[l]);  // w_s
        w.dts[l] = dt[l * H];
        w.wdt[l] = w.factor[l] * w.dts[l];
      }
      // qn[s] <- w_s (x_s dS); dots[s] = w_s x_s . (dS B_s), dt_s's direct term; dB_s += dt_s qn[s].
      scale_dot_add(q, N, w.factor, w.qn, N, Bg, in.ld, w.dots, w.dts, dBg, ld_d);
      scale_rows(q, N, w.wdt, Bg, in.ld, w.bs, N);
      k::gemm<T>(Trans::N, Trans::T, q, P, N, T(1), w.bs, N, ds, N, T(1), dxh, ld_d);
      T carry = T(0);
      if (has_in) {
        T dot = T(0);
#pragma omp simd reduction(+ : dot)
        for (int64_t e = 0; e < P * N; ++e) dot += ds[e] * s_in[e];
        carry = exp_to<T>(w.cs[q - 1]) * dot;
      }
      T run = T(0);
      for (int64_t kk = 0; kk < q; ++kk) {
        w.da[kk] += run + carry;
        run += w.dots[kk] * dt[kk * H];
        w.ddt[kk] += w.dots[kk];
      }
    }

    if (in.D != nullptr) dd_sums[j] = add_skip_grad(q, P, in.D[h], xh, in.ld, dyh, ld_dy, dxh, ld_d);

    T dA = T(0);
    for (int64_t kk = 0; kk < q; ++kk) {
      ddt[(u.row0 + kk) * H + h] = w.ddt[kk] + A * w.da[kk];
      dA += dt[kk * H] * w.da[kk];
    }
    da_sums[j] = dA;
  }
  k::gemm<T>(Trans::T, Trans::N, q, N, q, T(1), w.dcbt, q, Bg, in.ld, T(1), dCg, ld_d);
  k::gemm<T>(Trans::N, Trans::N, q, N, q, T(1), w.dcbt, q, Cg, in.ld, T(1), dBg, ld_d);
}

}  // namespace

template <class T>
void ssd_backward(const SsdShape& s, const SsdInputs<T>& in, const T* states, const T* dy, int64_t ld_dy,
                  T* dx, T* dB, T* dC, int64_t ld_d, T* ddt, T* dA, T* dD) {
  const int64_t nc = s.chunks(), q = std::min(s.chunk, s.seq), P = s.head_dim, N = s.state_dim, pn = P * N;
  const int64_t units = detail::unit_count(s), hpg = s.heads_per_group();
  for (int64_t h = 0; h < s.heads; ++h) {
    dA[h] = T(0);
    if (in.D != nullptr) dD[h] = T(0);
  }
  if (units == 0) return;
  const bool parallel = units > 1 && detail::worth_parallel(s.batch * s.seq * s.heads * pn);
  std::vector<T> chunk_decay(static_cast<std::size_t>(s.batch * s.heads * nc));
  Pooled dleave_buf;
  T* const dleave = dleave_buf.get<T>(static_cast<std::size_t>(s.states_size()));
  std::vector<T> da_sums(static_cast<std::size_t>(units * hpg)),
      dd_sums(static_cast<std::size_t>(units * hpg));
  detail::PerThread<double> cs_scratch(static_cast<std::size_t>(q));
  detail::PerThread<T> scratch(Work<T>::size(q, N) + static_cast<std::size_t>(q * P));

#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t i = 0; i < units; ++i) {
    T* work = scratch.mine();
    chunk_state_grads(s, in, dy, ld_dy, detail::unit_at(s, i), cs_scratch.mine(), work, work + q, dleave,
                      chunk_decay.data());
  }

  // B2. The gradient of the state leaving each chunk: zero for the last, then backwards.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    T* ds = dleave + bh * nc * pn;
    std::memset(static_cast<void*>(ds + (nc - 1) * pn), 0, static_cast<std::size_t>(pn) * sizeof(T));
    for (int64_t c = nc - 2; c >= 0; --c) {
      const T decay = chunk_decay[static_cast<std::size_t>(bh * nc + c + 1)];
      T* cur = ds + c * pn;
      const T* next = cur + pn;
      for (int64_t e = 0; e < pn; ++e) cur[e] += decay * next[e];
    }
  }

#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t i = 0; i < units; ++i) {
    Work<T> w(scratch.mine(), cs_scratch.mine(), q, N);
    chunk_backward(s, in, states, dleave, dy, ld_dy, detail::unit_at(s, i), w, dx, dB, dC, ld_d, ddt,
                   da_sums.data() + i * hpg, dd_sums.data() + i * hpg);
  }

  // dA and dD per head, summed over batch elements and chunks in a fixed order.
  for (int64_t i = 0; i < units; ++i) {
    const Unit u = detail::unit_at(s, i);
    for (int64_t j = 0; j < hpg; ++j) {
      const auto at = static_cast<std::size_t>(i * hpg + j);
      dA[u.g * hpg + j] += da_sums[at];
      if (in.D != nullptr) dD[u.g * hpg + j] += dd_sums[at];
    }
  }
}

template void ssd_backward<float>(const SsdShape&, const SsdInputs<float>&, const float*, const float*,
                                  int64_t, float*, float*, float*, int64_t, float*, float*, float*);
template void ssd_backward<double>(const SsdShape&, const SsdInputs<double>&, const double*, const double*,
                                   int64_t, double*, double*, double*, int64_t, double*, double*, double*);

SsdFlops ssd_flops(const SsdShape& s) {
  SsdFlops f;
  const auto P = static_cast<double>(s.head_dim), N = static_cast<double>(s.state_dim);
  const auto heads = static_cast<double>(s.heads), groups = static_cast<double>(s.groups);
  const int64_t nc = s.chunks();
  for (int64_t c = 0; c < nc; ++c) {
    const auto q = static_cast<double>(s.chunk_len(c));
    const double in = c > 0 ? 1 : 0, out = c + 1 < nc ? 1 : 0;
    // forward: CB (per group); chunk state, state to output, within-chunk output (per head)
    f.forward += 2 * (groups * q * q * N + heads * (out * P * N * q + in * q * P * N + q * q * P));
    // backward: CB, dC and dB from dCB (per group); dS local, dM, dx within, dY S, x dS, B dS^T
    f.backward += 2 * (groups * 3 * q * q * N +
                       heads * (in * P * N * q + 2 * q * q * P + in * q * N * P + 2 * out * q * N * P));
  }
  const auto b = static_cast<double>(s.batch);
  f.forward *= b;
  f.backward *= b;
  return f;
}

}  // namespace plexus::mamba

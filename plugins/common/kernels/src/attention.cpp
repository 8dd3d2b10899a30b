#include "plexus_kernels/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "plexus_kernels/fast_math.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/gemm.hpp"

namespace plexus::kernels {
namespace {

// Rows of queries per block. Smaller blocks skip more of the masked upper triangle but make
// smaller BLAS calls; 64 keeps the calls efficient while doing about (1 + 64/S) / 2 of the full
// S x S work under the causal mask (without it every block takes all S keys).
constexpr int64_t kQueryBlock = 64;

int team_size(int64_t tasks) {
  if (omp_in_parallel()) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), tasks)));
}

// Row i of a block of scores (already scaled) becomes softmax over its first n entries (causal:
// n = i + 1; bidirectional: n = S), and zeros up to `width`.
template <class T>
void softmax_row(T* row, int64_t n, int64_t width) {
  T mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int64_t t = 1; t < n; ++t) mx = row[t] > mx ? row[t] : mx;
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t t = 0; t < n; ++t) {
    const T e = detail::exp_fast<T>(row[t] - mx);
    row[t] = e;
    sum += e;
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) row[t] *= inv;
  for (int64_t t = n; t < width; ++t) row[t] = T(0);
}

}  // namespace

AttentionLayout AttentionLayout::megatron(int64_t batch, int64_t seq, int64_t heads, int64_t groups,
                                          int64_t head_dim) {
  AttentionLayout l;
  l.batch = batch;
  l.seq = seq;
  l.heads = heads;
  l.groups = groups;
  l.head_dim = head_dim;
  const int64_t per = groups > 0 ? heads / groups : 0;
  l.ld = (heads + 2 * groups) * head_dim;
  l.q_offset = 0;
  l.k_offset = per * head_dim;
  l.v_offset = (per + 1) * head_dim;
  l.q_group_stride = (per + 2) * head_dim;
  l.kv_group_stride = (per + 2) * head_dim;
  return l;
}

int64_t AttentionLayout::q_column(int64_t head) const {
  const int64_t per = heads / groups;
  return q_offset + (head / per) * q_group_stride + (head % per) * head_dim;
}
int64_t AttentionLayout::k_column(int64_t group) const {
  return k_offset + group * kv_group_stride;
}
int64_t AttentionLayout::v_column(int64_t group) const {
  return v_offset + group * kv_group_stride;
}

void AttentionLayout::validate() const {
  if (batch < 0 || seq < 0 || heads <= 0 || groups <= 0 || head_dim <= 0 || heads % groups != 0)
    throw std::invalid_argument("attention: invalid sizes (batch " + std::to_string(batch) + ", seq " +
                                std::to_string(seq) + ", heads " + std::to_string(heads) + ", groups " +
                                std::to_string(groups) + ", head_dim " + std::to_string(head_dim) + ")");
  const int64_t last = std::max({q_column(heads - 1), k_column(groups - 1), v_column(groups - 1)}) + head_dim;
  if (ld < last)
    throw std::invalid_argument("attention: row stride " + std::to_string(ld) +
                                " is shorter than the last head's end " + std::to_string(last));
}

template <class T>
void attention_forward(const AttentionLayout& l, const T* qkv, T* out, T* probs) {
  l.validate();
  const int64_t S = l.seq, hd = l.head_dim, ld = l.ld, H = l.heads, per = l.heads / l.groups;
  const int64_t ldo = H * hd;
  const T scale = T(1) / std::sqrt(static_cast<T>(hd));
  const int64_t tasks = l.batch * H;
  const int threads = team_size(tasks);
  Buffer scratch;  // per-thread score blocks when no probabilities are kept
  T* local = probs == nullptr ? scratch.get<T>(static_cast<std::size_t>(threads * kQueryBlock * S)) : nullptr;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / H, h = task % H, g = h / per;
    const T* base = qkv + b * S * ld;
    const T* q = base + l.q_column(h);
    const T* k = base + l.k_column(g);
    const T* v = base + l.v_column(g);
    T* o = out + b * S * ldo + h * hd;
    for (int64_t i0 = 0; i0 < S; i0 += kQueryBlock) {
      const int64_t i1 = std::min(S, i0 + kQueryBlock), m = i1 - i0;
      // The keys this block sees: 0..i1-1 under the causal mask (the rest is masked), else all S.
      const int64_t keys = l.causal ? i1 : S;
      // Scores of this block of queries against those keys.
      T* p;
      int64_t ldp;
      if (probs != nullptr) {
        p = probs + task * S * S + i0 * S;
        ldp = S;
      } else {
        p = local + static_cast<int64_t>(omp_get_thread_num()) * kQueryBlock * S;
        ldp = keys;
      }
      gemm<T>(Trans::N, Trans::T, m, keys, hd, scale, q + i0 * ld, ld, k, ld, T(0), p, ldp);
      for (int64_t i = i0; i < i1; ++i)
        softmax_row(p + (i - i0) * ldp, l.causal ? i + 1 : S, probs != nullptr ? S : keys);
      gemm<T>(Trans::N, Trans::N, m, hd, keys, T(1), p, ldp, v, ld, T(0), o + i0 * ldo, ldo);
    }
  }
}

template <class T>
void attention_backward(const AttentionLayout& l, const T* qkv, const T* probs, const T* out, const T* dout,
                        T* dqkv) {
  l.validate();
  const int64_t S = l.seq, hd = l.head_dim, ld = l.ld, H = l.heads, per = l.heads / l.groups;
  const int64_t ldo = H * hd;
  const T scale = T(1) / std::sqrt(static_cast<T>(hd));
  const int64_t tasks = l.batch * l.groups;
  const int threads = team_size(tasks);
  Buffer scratch;  // per-thread dS block [kQueryBlock, S]
  T* local = scratch.get<T>(static_cast<std::size_t>(threads * kQueryBlock * S));
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / l.groups, g = task % l.groups;
    const T* base = qkv + b * S * ld;
    T* dbase = dqkv + b * S * ld;
    const T* k = base + l.k_column(g);
    const T* v = base + l.v_column(g);
    T* dk = dbase + l.k_column(g);
    T* dv = dbase + l.v_column(g);
    for (int64_t t = 0; t < S; ++t) {  // the heads of the group accumulate into dk and dv
      std::memset(static_cast<void*>(dk + t * ld), 0, static_cast<std::size_t>(hd) * sizeof(T));
      std::memset(static_cast<void*>(dv + t * ld), 0, static_cast<std::size_t>(hd) * sizeof(T));
    }
    T* ds = local + static_cast<int64_t>(omp_get_thread_num()) * kQueryBlock * S;
    for (int64_t j = 0; j < per; ++j) {
      const int64_t h = g * per + j;
      const T* q = base + l.q_column(h);
      T* dq = dbase + l.q_column(h);
      const T* p = probs + (b * H + h) * S * S;
      const T* o = out + b * S * ldo + h * hd;
      const T* dout_h = dout + b * S * ldo + h * hd;
      for (int64_t i0 = 0; i0 < S; i0 += kQueryBlock) {
        const int64_t i1 = std::min(S, i0 + kQueryBlock), m = i1 - i0;
        // The keys this block sees, as in forward: 0..i1-1 under the causal mask, else all S.
        const int64_t keys = l.causal ? i1 : S;
        // dP = dO V^T over those keys.
        gemm<T>(Trans::N, Trans::T, m, keys, hd, T(1), dout_h + i0 * ldo, ldo, v, ld, T(0), ds, keys);
        // dS = P * (dP - rowsum(dO * O)) over the keys row i sees; zero where masked (P is zero
        // there; without the mask nothing is).
        for (int64_t i = i0; i < i1; ++i) {
          const T* oi = o + i * ldo;
          const T* gi = dout_h + i * ldo;
          T dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t d = 0; d < hd; ++d) dot += oi[d] * gi[d];
          T* row = ds + (i - i0) * keys;
          const T* prow = p + i * S;
          const int64_t seen = l.causal ? i + 1 : S;
#pragma omp simd
          for (int64_t t = 0; t < seen; ++t) row[t] = prow[t] * (row[t] - dot);
          for (int64_t t = seen; t < keys; ++t) row[t] = T(0);
        }
        // dQ = scale dS K (rows i0..i1-1, written); dK += scale dS^T Q; dV += P^T dO.
        gemm<T>(Trans::N, Trans::N, m, hd, keys, scale, ds, keys, k, ld, T(0), dq + i0 * ld, ld);
        gemm<T>(Trans::T, Trans::N, keys, hd, m, scale, ds, keys, q + i0 * ld, ld, T(1), dk, ld);
        gemm<T>(Trans::T, Trans::N, keys, hd, m, T(1), p + i0 * S, S, dout_h + i0 * ldo, ldo, T(1), dv, ld);
      }
    }
  }
}

template void attention_forward<float>(const AttentionLayout&, const float*, float*, float*);
template void attention_forward<double>(const AttentionLayout&, const double*, double*, double*);
template void attention_backward<float>(const AttentionLayout&, const float*, const float*, const float*,
                                        const float*, float*);
template void attention_backward<double>(const AttentionLayout&, const double*, const double*, const double*,
                                         const double*, double*);

}  // namespace plexus::kernels

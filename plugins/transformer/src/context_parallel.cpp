// The block-wise context-parallel attention core of context_parallel.hpp, on the CPU.
#include "context_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plexus_kernels/gemm.hpp"
#include "plexus_kernels/rope.hpp"

namespace plexus::transformer {
namespace {

// Megatron's qkv layout: group g holds its heads / groups query heads, then its key and its value.
struct Columns {
  int64_t per, hd;
  int64_t query(int64_t h) const { return ((h / per) * (per + 2) + h % per) * hd; }
  int64_t key(int64_t g) const { return (g * (per + 2) + per) * hd; }
  int64_t packed_key(int64_t g) const { return 2 * g * hd; }
  int64_t packed_value(int64_t g) const { return (2 * g + 1) * hd; }
};

Columns columns(const ContextParallelLayout& l) {
  return {l.heads / l.groups, l.head_dim};
}

template <class T>
double dot(const T* a, const T* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

}  // namespace

template <class T>
void rope_at_global_positions(const ContextParallelLayout& l, T* x, int64_t ld, const int64_t* cols,
                              int64_t num_heads, const T* cos_table, const T* sin_table, bool inverse) {
  const int64_t chunk = l.seq / 2, half = l.head_dim / 2;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t c = 0; c < 2; ++c) {
      const int64_t first = context_parallel_position(c * chunk, l.seq, l.rank, l.size);
      kernels::rope_apply<T>(x + (b * l.seq + c * chunk) * ld, chunk, chunk, ld, cols, num_heads, l.head_dim,
                             cos_table + first * half, sin_table + first * half, inverse);
    }
}

template <class T>
void pack_kv(const ContextParallelLayout& l, const T* qkv, T* kv) {
  const Columns col = columns(l);
  for (int64_t n = 0; n < l.tokens(); ++n)
    for (int64_t g = 0; g < l.groups; ++g)
      std::copy_n(qkv + n * l.rows() + col.key(g), 2 * l.head_dim, kv + n * l.kv_cols() + col.packed_key(g));
}

template <class T>
void add_kv_gradient(const ContextParallelLayout& l, const T* dkv, T* dqkv) {
  const Columns col = columns(l);
  for (int64_t n = 0; n < l.tokens(); ++n)
    for (int64_t g = 0; g < l.groups; ++g) {
      const T* from = dkv + n * l.kv_cols() + col.packed_key(g);
      T* to = dqkv + n * l.rows() + col.key(g);
      for (int64_t d = 0; d < 2 * l.head_dim; ++d) to[d] += from[d];
    }
}

SoftmaxRows::SoftmaxRows(const ContextParallelLayout& l)
    : max(static_cast<std::size_t>(l.batch * l.heads * l.seq), -std::numeric_limits<double>::infinity()),
      sum(max.size(), 0.0),
      acc(max.size() * static_cast<std::size_t>(l.head_dim), 0.0) {}

namespace {

// How a query chunk sees a key chunk of L tokens each (chunks start at multiples of L): whole,
// not at all, or causally (the same chunk of the sequence).
enum class Sight { none, whole, causal };
Sight sight(int64_t query_first, int64_t key_first, int64_t chunk) {
  if (key_first > query_first) return Sight::none;
  return key_first + chunk <= query_first ? Sight::whole : Sight::causal;
}

// The first global position of chunk c (0 or 1) of rank r.
int64_t chunk_first(const ContextParallelLayout& l, int64_t c, int32_t r) {
  return context_parallel_position(c * (l.seq / 2), l.seq, r, l.size);
}

}  // namespace

// Per (batch, head), each visible (query chunk, key chunk) pair as L x L products: the scores
// S = scale Q K^T, masked on the diagonal chunk, merged into the running rows, and P V added to
// their sums.
template <class T>
void attend_block(const ContextParallelLayout& l, const T* qkv, const T* kv, int32_t source,
                  SoftmaxRows& rows) {
  const Columns col = columns(l);
  const int64_t hd = l.head_dim, ld = l.rows(), kv_ld = l.kv_cols(), chunk = l.seq / 2;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < l.heads; ++h) {
      const int64_t g = h / col.per;
      std::vector<T> scores(static_cast<std::size_t>(chunk * chunk)),
          pv(static_cast<std::size_t>(chunk * hd));
      for (int64_t qc = 0; qc < 2; ++qc)
        for (int64_t kc = 0; kc < 2; ++kc) {
          const Sight how = sight(chunk_first(l, qc, l.rank), chunk_first(l, kc, source), chunk);
          if (how == Sight::none) continue;
          const T* q = qkv + (b * l.seq + qc * chunk) * ld + col.query(h);
          const T* k = kv + (b * l.seq + kc * chunk) * kv_ld + col.packed_key(g);
          const T* v = kv + (b * l.seq + kc * chunk) * kv_ld + col.packed_value(g);
          kernels::gemm<T>(kernels::Trans::N, kernels::Trans::T, chunk, chunk, hd, scale, q, ld, k, kv_ld,
                           T(0), scores.data(), chunk);
          for (int64_t i = 0; i < chunk; ++i) {
            T* row = scores.data() + i * chunk;
            const int64_t seen = how == Sight::causal ? i + 1 : chunk;
            const auto r = static_cast<std::size_t>((b * l.heads + h) * l.seq + qc * chunk + i);
            double most = rows.max[r];
            for (int64_t j = 0; j < seen; ++j) most = std::max(most, static_cast<double>(row[j]));
            const double rescale = std::exp(rows.max[r] - most);
            double sum = rows.sum[r] * rescale;
            for (int64_t j = 0; j < chunk; ++j) {
              row[j] = j < seen ? static_cast<T>(std::exp(static_cast<double>(row[j]) - most)) : T(0);
              sum += static_cast<double>(row[j]);
            }
            double* acc = rows.acc.data() + r * static_cast<std::size_t>(hd);
            for (int64_t d = 0; d < hd; ++d) acc[d] *= rescale;
            rows.max[r] = most;
            rows.sum[r] = sum;
          }
          kernels::gemm<T>(kernels::Trans::N, kernels::Trans::N, chunk, hd, chunk, T(1), scores.data(), chunk,
                           v, kv_ld, T(0), pv.data(), hd);
          for (int64_t i = 0; i < chunk; ++i) {
            double* acc =
                rows.acc.data() + static_cast<std::size_t>(((b * l.heads + h) * l.seq + qc * chunk + i) * hd);
            for (int64_t d = 0; d < hd; ++d)
              acc[d] += static_cast<double>(pv[static_cast<std::size_t>(i * hd + d)]);
          }
        }
    }
}

template <class T>
void finish_rows(const ContextParallelLayout& l, const SoftmaxRows& rows, T* o, double* lse) {
  const int64_t hd = l.head_dim;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t t = 0; t < l.seq; ++t) {
        const auto row = static_cast<std::size_t>((b * l.heads + h) * l.seq + t);
        const double* acc = rows.acc.data() + row * static_cast<std::size_t>(hd);
        T* out = o + (b * l.seq + t) * l.heads * hd + h * hd;
        for (int64_t d = 0; d < hd; ++d) out[d] = static_cast<T>(acc[d] / rows.sum[row]);
        lse[row] = rows.max[row] + std::log(rows.sum[row]);
      }
}

// Per (batch, group), each visible (query chunk, key chunk) pair: P recomputed from the rows'
// log-sum-exp, dP = dO V^T, dS = P (dP - rowsum(dO o O)) scale, then dQ += dS K, dK += dS^T Q and
// dV += P^T dO as L x L x hd products.
template <class T>
void attend_block_backward(const ContextParallelLayout& l, const T* qkv, const T* kv, int32_t source,
                           const T* o, const double* lse, const T* d_o, T* dqkv, T* dkv) {
  const Columns col = columns(l);
  const int64_t hd = l.head_dim, ld = l.rows(), kv_ld = l.kv_cols(), out_ld = l.heads * hd, chunk = l.seq / 2;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  // A (batch, group) per thread: the group's key and value gradients are its own.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t g = 0; g < l.groups; ++g) {
      std::vector<T> p(static_cast<std::size_t>(chunk * chunk)), dp(p.size());
      std::vector<double> delta(static_cast<std::size_t>(chunk));
      for (int64_t h = g * col.per; h < (g + 1) * col.per; ++h)
        for (int64_t qc = 0; qc < 2; ++qc) {
          const int64_t q_row = b * l.seq + qc * chunk;
          for (int64_t i = 0; i < chunk; ++i)
            delta[static_cast<std::size_t>(i)] =
                dot(d_o + (q_row + i) * out_ld + h * hd, o + (q_row + i) * out_ld + h * hd, hd);
          for (int64_t kc = 0; kc < 2; ++kc) {
            const Sight how = sight(chunk_first(l, qc, l.rank), chunk_first(l, kc, source), chunk);
            if (how == Sight::none) continue;
            const int64_t k_row = b * l.seq + kc * chunk;
            const T* q = qkv + q_row * ld + col.query(h);
            const T* k = kv + k_row * kv_ld + col.packed_key(g);
            const T* v = kv + k_row * kv_ld + col.packed_value(g);
            const T* dout = d_o + q_row * out_ld + h * hd;
            kernels::gemm<T>(kernels::Trans::N, kernels::Trans::T, chunk, chunk, hd, scale, q, ld, k, kv_ld,
                             T(0), p.data(), chunk);
            kernels::gemm<T>(kernels::Trans::N, kernels::Trans::T, chunk, chunk, hd, T(1), dout, out_ld, v,
                             kv_ld, T(0), dp.data(), chunk);
            for (int64_t i = 0; i < chunk; ++i) {
              const double row_lse = lse[(b * l.heads + h) * l.seq + qc * chunk + i];
              const int64_t seen = how == Sight::causal ? i + 1 : chunk;
              for (int64_t j = 0; j < chunk; ++j) {
                const auto e = static_cast<std::size_t>(i * chunk + j);
                const double prob = j < seen ? std::exp(static_cast<double>(p[e]) - row_lse) : 0.0;
                p[e] = static_cast<T>(prob);
                dp[e] =
                    static_cast<T>(prob * (static_cast<double>(dp[e]) - delta[static_cast<std::size_t>(i)]) *
                                   static_cast<double>(scale));
              }
            }
            kernels::gemm<T>(kernels::Trans::N, kernels::Trans::N, chunk, hd, chunk, T(1), dp.data(), chunk,
                             k, kv_ld, T(1), dqkv + q_row * ld + col.query(h), ld);
            kernels::gemm<T>(kernels::Trans::T, kernels::Trans::N, chunk, hd, chunk, T(1), dp.data(), chunk,
                             q, ld, T(1), dkv + k_row * kv_ld + col.packed_key(g), kv_ld);
            kernels::gemm<T>(kernels::Trans::T, kernels::Trans::N, chunk, hd, chunk, T(1), p.data(), chunk,
                             dout, out_ld, T(1), dkv + k_row * kv_ld + col.packed_value(g), kv_ld);
          }
        }
    }
}

#define PLEXUS_CP_INSTANTIATE(T)                                                                          \
  template void rope_at_global_positions<T>(const ContextParallelLayout&, T*, int64_t, const int64_t*,    \
                                            int64_t, const T*, const T*, bool);                           \
  template void pack_kv<T>(const ContextParallelLayout&, const T*, T*);                                   \
  template void add_kv_gradient<T>(const ContextParallelLayout&, const T*, T*);                           \
  template void attend_block<T>(const ContextParallelLayout&, const T*, const T*, int32_t, SoftmaxRows&); \
  template void finish_rows<T>(const ContextParallelLayout&, const SoftmaxRows&, T*, double*);            \
  template void attend_block_backward<T>(const ContextParallelLayout&, const T*, const T*, int32_t,       \
                                         const T*, const double*, const T*, T*, T*);
PLEXUS_CP_INSTANTIATE(float)
PLEXUS_CP_INSTANTIATE(double)
#undef PLEXUS_CP_INSTANTIATE

}  // namespace plexus::transformer

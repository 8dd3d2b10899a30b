// post_res: the new residual streams, per token and stream i,
//   y_i = sum_j H(i, j) * x_j + H_post[i] * (f + bias)
// with H(i, j) = H_res[i][j], or H_res[j][i] under PLX_MHC_TRANSPOSED_H_RES.
// One pass over tokens, one thread per contiguous range. A token's C values go in tiles of
// kTile so that the tile's n rows of x, dy and dx stay in L1 while every output is formed from
// them: forward reads x and f once and writes y once; backward reads x, f and dy once, reads
// and writes dx once and writes df once, and forms dH_res and dH_post (dot products over C) and
// the per-thread sum of dbias in the same pass. dbias's per-thread sums are combined in thread
// order.
//
// Rounding (rows.hpp): the n-term sums (the stream mix, dx's mix, df) accumulate in T, stream 0
// first; the dot products in T within a tile and in double across tiles; the reference rounds
// once after summing in double (last-bit differences in float32).
#include <algorithm>
#include <vector>

#include "fused.hpp"
#include "rows.hpp"
#include "simd.hpp"
#include "small_array.hpp"
#include "team.hpp"

namespace plexus::mhc_fused {
namespace {

// Values of C per tile: a tile's n = 8 rows of x, dy and dx (float32) fill 48 KiB of L1.
constexpr int64_t kTile = 512;
constexpr std::size_t kInlineMatrix = 8 * 8;  // a token's H on the stack up to n = 8

// H(i, j) of token t in row-major order, whichever orientation H_res is read in (transposed:
// H_res[j][i]).
template <class T>
PLEXUS_MHC_FUSED_INLINE void mixing_matrix(const T* h_res, int64_t t, int64_t n, bool transposed, T* out) {
  const T* h = h_res + t * n * n;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) out[i * n + j] = transposed ? h[j * n + i] : h[i * n + j];
}

// f + bias of one tile (just f without a bias).
template <class T>
PLEXUS_MHC_FUSED_INLINE void f_plus_bias(const T* f, const T* bias, int64_t length, T* out) {
  if (bias == nullptr) {
    std::copy_n(f, length, out);
    return;
  }
#pragma omp simd
  for (int64_t k = 0; k < length; ++k) out[k] = f[k] + bias[k];
}

template <class T>
struct Forward {
  const T* x;
  const T* h_res;
  const T* h_post;
  const T* f;
  const T* bias;  // nullptr: F has none
  T* y;
  int64_t n, c;
  bool transposed;
};

template <class T>
PLEXUS_MHC_FUSED_INLINE void forward_tokens(const Forward<T>& a, int64_t begin, int64_t end) {
  const int64_t n = a.n, c = a.c;
  const auto rows = static_cast<std::size_t>(n + 1);
  SmallArray<T, kInlineMatrix> mix(static_cast<std::size_t>(n * n));
  SmallArray<const T*, 9> source(rows);  // x_0 .. x_{n-1}, f + bias: the rows y_i mixes
  SmallArray<T, 9> weight(rows);         // H(i, 0 .. n-1), H_post[i]
  alignas(64) T fb[kTile];
  alignas(64) T tmp[kTile];
  for (int64_t t = begin; t < end; ++t) {
    mixing_matrix(a.h_res, t, n, a.transposed, mix.data());
    const T* xt = a.x + t * n * c;
    for (int64_t k0 = 0; k0 < c; k0 += kTile) {
      const int64_t len = std::min(kTile, c - k0);
      f_plus_bias(a.f + t * c + k0, a.bias != nullptr ? a.bias + k0 : nullptr, len, fb);
      for (int64_t j = 0; j < n; ++j) source[j] = xt + j * c + k0;
      source[n] = fb;
      for (int64_t i = 0; i < n; ++i) {
        // y_i = sum_j H(i, j) x_j + H_post[i] (f + bias), the mix first as in the reference.
        std::copy_n(mix.data() + i * n, n, weight.data());
        weight[n] = a.h_post[t * n + i];
        weighted_sum(source.data(), weight.data(), n + 1, len, tmp, a.y + (t * n + i) * c + k0, Into::write);
      }
    }
  }
}

template <class T>
struct Backward {
  const T* x;
  const T* h_res;
  const T* h_post;
  const T* f;
  const T* bias;
  const T* dy;
  T* dx;  // each optional: nullptr when not wanted
  T* dh_res;
  T* dh_post;
  T* df;
  int64_t n, c;
  bool transposed;
};

// Tokens [begin, end); adds sum_t df[t] to bias_sum ([C], double) when it is given.
template <class T>
PLEXUS_MHC_FUSED_INLINE void backward_tokens(const Backward<T>& a, int64_t begin, int64_t end,
                                             Acc* bias_sum) {
  const int64_t n = a.n, c = a.c;
  const auto nn = static_cast<std::size_t>(n * n);
  SmallArray<T, kInlineMatrix> mix_t(nn);    // H transposed: row j holds H(0 .. n-1, j)
  SmallArray<Acc, kInlineMatrix> d_mix(nn);  // dH(i, j), summed over the token's tiles
  SmallArray<Acc, 8> d_post(static_cast<std::size_t>(n));
  SmallArray<const T*, 8> dy_rows(static_cast<std::size_t>(n));
  alignas(64) T fb[kTile];       // f + bias of the tile
  alignas(64) T tmp[kTile];      // the running sum of weighted_sum (n > 4)
  alignas(64) T df_tile[kTile];  // df of the tile when only dbias wants it
  for (int64_t t = begin; t < end; ++t) {
    mixing_matrix(a.h_res, t, n, !a.transposed, mix_t.data());  // the other orientation: H^T
    std::fill_n(d_mix.data(), nn, 0.0);
    std::fill_n(d_post.data(), n, 0.0);
    const T* xt = a.x + t * n * c;
    const T* dyt = a.dy + t * n * c;
    const T* hp = a.h_post + t * n;
    for (int64_t k0 = 0; k0 < c; k0 += kTile) {
      const int64_t len = std::min(kTile, c - k0);
      for (int64_t i = 0; i < n; ++i) dy_rows[i] = dyt + i * c + k0;
      if (a.df != nullptr || bias_sum != nullptr) {  // df = sum_i H_post[i] dy_i; dbias += df
        T* d = a.df != nullptr ? a.df + t * c + k0 : df_tile;
        weighted_sum(dy_rows.data(), hp, n, len, tmp, d, Into::write);
        if (bias_sum != nullptr) {
          Acc* sum = bias_sum + k0;
#pragma omp simd
          for (int64_t k = 0; k < len; ++k) sum[k] += static_cast<Acc>(d[k]);
        }
      }
      if (a.dx != nullptr)  // dx_j += sum_i H(i, j) dy_i, the sum formed first
        for (int64_t j = 0; j < n; ++j)
          weighted_sum(dy_rows.data(), mix_t.data() + j * n, n, len, tmp, a.dx + (t * n + j) * c + k0,
                       Into::add);
      if (a.dh_res != nullptr)  // dH(i, j) = <dy_i, x_j>
        for (int64_t j = 0; j < n; ++j)
          dots_with_rows(xt + j * c + k0, dy_rows.data(), n, len, d_mix.data() + j, n);
      if (a.dh_post != nullptr) {  // dH_post[i] = <dy_i, f + bias>
        f_plus_bias(a.f + t * c + k0, a.bias != nullptr ? a.bias + k0 : nullptr, len, fb);
        dots_with_rows(fb, dy_rows.data(), n, len, d_post.data(), 1);
      }
    }
    if (a.dh_res != nullptr)  // stored where H(i, j) is read
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t at = a.transposed ? (t * n + j) * n + i : (t * n + i) * n + j;
          a.dh_res[at] = static_cast<T>(d_mix[static_cast<std::size_t>(i * n + j)]);
        }
    if (a.dh_post != nullptr)
      for (int64_t i = 0; i < n; ++i)
        a.dh_post[t * n + i] = static_cast<T>(d_post[static_cast<std::size_t>(i)]);
  }
}

PLEXUS_MHC_FUSED_CLONES void post_res_tokens_f32(const Forward<float>& a, int64_t begin, int64_t end) {
  forward_tokens(a, begin, end);
}
PLEXUS_MHC_FUSED_CLONES void post_res_tokens_f64(const Forward<double>& a, int64_t begin, int64_t end) {
  forward_tokens(a, begin, end);
}
PLEXUS_MHC_FUSED_CLONES void post_res_grad_tokens_f32(const Backward<float>& a, int64_t begin, int64_t end,
                                                      Acc* bias) {
  backward_tokens(a, begin, end, bias);
}
PLEXUS_MHC_FUSED_CLONES void post_res_grad_tokens_f64(const Backward<double>& a, int64_t begin, int64_t end,
                                                      Acc* bias) {
  backward_tokens(a, begin, end, bias);
}
void run_tokens(const Forward<float>& a, int64_t begin, int64_t end) {
  post_res_tokens_f32(a, begin, end);
}
void run_tokens(const Forward<double>& a, int64_t begin, int64_t end) {
  post_res_tokens_f64(a, begin, end);
}
void run_tokens(const Backward<float>& a, int64_t begin, int64_t end, Acc* bias) {
  post_res_grad_tokens_f32(a, begin, end, bias);
}
void run_tokens(const Backward<double>& a, int64_t begin, int64_t end, Acc* bias) {
  post_res_grad_tokens_f64(a, begin, end, bias);
}

}  // namespace

template <class T>
void CpuPrimitives<T>::post_res_forward(const MhcProblem& pb, const plx_mhc_post_res_forward_args& a) {
  const Forward<T> args{mhc_in<T>(a.x),       mhc_in<T>(a.h_res), mhc_in<T>(a.h_post), mhc_in<T>(a.f),
                        mhc_in_if<T>(a.bias), mhc_out<T>(a.y),    pb.streams,          pb.hidden,
                        pb.transposed_h_res};
  const double work = static_cast<double>(pb.tokens) * static_cast<double>(pb.streams * pb.hidden) *
                      static_cast<double>(pb.streams + 1);
  run_parts(part_count(pb.tokens, work), [&](int part, int parts) {
    const Range mine = part_range(pb.tokens, part, parts);
    run_tokens(args, mine.begin, mine.end);
  });
}

template <class T>
void CpuPrimitives<T>::post_res_backward(const MhcProblem& pb, const plx_mhc_post_res_backward_args& a) {
  const Backward<T> args{
      mhc_in<T>(a.x),           mhc_in<T>(a.h_res),  mhc_in<T>(a.h_post), mhc_in<T>(a.f),
      mhc_in_if<T>(a.bias),     mhc_in<T>(a.dy),     mhc_out_if<T>(a.dx), mhc_out_if<T>(a.dh_res),
      mhc_out_if<T>(a.dh_post), mhc_out_if<T>(a.df), pb.streams,          pb.hidden,
      pb.transposed_h_res};
  T* dbias = mhc_out_if<T>(a.dbias);
  if (args.dx == nullptr && args.dh_res == nullptr && args.dh_post == nullptr && args.df == nullptr &&
      dbias == nullptr)
    return;
  const double work = static_cast<double>(pb.tokens) * static_cast<double>(pb.streams * pb.hidden) *
                      (2.0 * static_cast<double>(pb.streams) + 3.0);
  const int parts = part_count(pb.tokens, work);

  // dbias: one sum per part over its tokens, in double, combined in part order below.
  const auto c = static_cast<std::size_t>(pb.hidden);
  std::vector<Acc> bias_sums(dbias != nullptr ? static_cast<std::size_t>(parts) * c : 0, 0.0);
  run_parts(parts, [&](int part, int) {
    const Range mine = part_range(pb.tokens, part, parts);
    run_tokens(args, mine.begin, mine.end, dbias != nullptr ? bias_sums.data() + part * c : nullptr);
  });

  if (dbias == nullptr) return;
  for (int part = 1; part < parts; ++part)
    for (std::size_t k = 0; k < c; ++k) bias_sums[k] += bias_sums[part * c + k];
  for (std::size_t k = 0; k < c; ++k) dbias[k] += static_cast<T>(bias_sums[k]);
}

PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, post_res, float);
PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, post_res, double);

}  // namespace plexus::mhc_fused

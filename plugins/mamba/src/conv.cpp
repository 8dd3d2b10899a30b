#include "conv.hpp"

#include <algorithm>
#include <vector>

#include "math.hpp"
#include "parallel.hpp"
#include "plexus_kernels/parts.hpp"

namespace plexus::mamba {
namespace {

using detail::sigmoid;

// Rows per task of the forward: enough work per task (thousands of channels each).
constexpr int64_t kRowBlock = 8;
// Rows per task of the backward, which recomputes W - 1 rows past its end: 2% more at W = 4.
constexpr int64_t kBackwardRowBlock = 128;

// wt[k][c] = w[c][k]: the kernel taps as rows, so the loops over channels read them contiguously.
template <class T>
std::vector<T> taps(const ConvShape& s, const T* w) {
  std::vector<T> wt(static_cast<std::size_t>(s.width * s.channels));
  for (int64_t c = 0; c < s.channels; ++c)
    for (int64_t k = 0; k < s.width; ++k)
      wt[static_cast<std::size_t>(k * s.channels + c)] = w[c * s.width + k];
  return wt;
}

// v of row r (token t of its sequence) into v[0, C).
template <class T>
[[gnu::always_inline]] inline void convolve_row(const ConvShape& s, int64_t r, const T* in, int64_t ld_in,
                                                const T* wt, const T* bias, T* v) {
  const int64_t C = s.channels, W = s.width, t = r % s.seq;
  for (int64_t c = 0; c < C; ++c) v[c] = bias[c];
  for (int64_t k = std::max<int64_t>(0, W - 1 - t); k < W; ++k) {
    const T* x = in + (r - (W - 1) + k) * ld_in;
    const T* tap = wt + k * C;
    for (int64_t c = 0; c < C; ++c) v[c] += tap[c] * x[c];
  }
}

// dv of row r, dout silu'(v) with v recomputed, into v[0, C).
template <class T>
[[gnu::always_inline]] inline void silu_grad_row(const ConvShape& s, int64_t r, const T* in, int64_t ld_in,
                                                 const T* wt, const T* bias, const T* dout, T* v) {
  convolve_row(s, r, in, ld_in, wt, bias, v);
  const T* d = dout + r * s.channels;
  for (int64_t c = 0; c < s.channels; ++c) {
    const T sg = sigmoid(v[c]);
    v[c] = d[c] * sg * (T(1) + v[c] * (T(1) - sg));
  }
}

template <class T>
PLEXUS_KERNELS_SIMD_CLONES void forward_rows(const ConvShape& s, int64_t r0, int64_t r1, const T* in,
                                             int64_t ld_in, const T* wt, const T* bias, T* out, T* pre) {
  const int64_t C = s.channels;
  for (int64_t r = r0; r < r1; ++r) {
    T* o = out + r * C;
    convolve_row(s, r, in, ld_in, wt, bias, o);
    if (pre != nullptr)
      for (int64_t c = 0; c < C; ++c) pre[r * C + c] = o[c];
    for (int64_t c = 0; c < C; ++c) o[c] *= sigmoid(o[c]);
  }
}

// The backward of rows [r0, r1) in one pass. dv = dout silu'(v) (v recomputed from the input,
// silu'(v) = sigmoid(v) (1 + v (1 - sigmoid(v)))) is kept for W rows at a time in `ring` (row r
// in slot r mod W): row r's input gradient reads dv of rows r .. r + W - 1 (the taps that read
// token r), so each block also recomputes dv for the W - 1 rows after it. Weight and bias
// gradients are summed into the thread's dwt [W][C] and db [C].
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void backward_rows(const ConvShape& s, int64_t r0, int64_t r1, const T* in,
                                              int64_t ld_in, const T* wt, const T* bias, const T* dout,
                                              T* din, int64_t ld_din, T* ring, T* dwt, T* db) {
  const int64_t C = s.channels, W = s.width, rows = s.batch * s.seq;
  for (int64_t r = r0; r < std::min(rows, r0 + W - 1); ++r)
    silu_grad_row(s, r, in, ld_in, wt, bias, dout, ring + (r % W) * C);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t t = r % s.seq;
    if (r + W - 1 < rows)
      silu_grad_row(s, r + W - 1, in, ld_in, wt, bias, dout, ring + ((r + W - 1) % W) * C);
    // din[r] = sum over k of dv[r + (W - 1) - k] wt[k], for readers within the sequence.
    // Tap W - 1 (the current token) always reads within the sequence: it initializes the row.
    T* o = din + r * ld_din;
    const T* last = wt + (W - 1) * C;
    const T* own = ring + (r % W) * C;
    for (int64_t c = 0; c < C; ++c) o[c] = last[c] * own[c];
    for (int64_t k = 0; k < W - 1; ++k) {
      const int64_t reader = t + (W - 1) - k;
      if (reader >= s.seq) continue;
      const T* d = ring + ((r + (W - 1) - k) % W) * C;
      const T* tap = wt + k * C;
      for (int64_t c = 0; c < C; ++c) o[c] += tap[c] * d[c];
    }
    // dw[k] += dv[r] in[r - (W - 1) + k], db += dv[r].
    const T* d = ring + (r % W) * C;
    for (int64_t c = 0; c < C; ++c) db[c] += d[c];
    for (int64_t k = std::max<int64_t>(0, W - 1 - t); k < W; ++k) {
      const T* x = in + (r - (W - 1) + k) * ld_in;
      T* acc = dwt + k * C;
      for (int64_t c = 0; c < C; ++c) acc[c] += d[c] * x[c];
    }
  }
}

}  // namespace

template <class T>
void conv_silu_forward(const ConvShape& s, const T* in, int64_t ld_in, const T* w, const T* bias, T* out,
                       T* pre) {
  const std::vector<T> wt = taps(s, w);
  const int64_t rows = s.batch * s.seq, blocks = (rows + kRowBlock - 1) / kRowBlock;
  const bool parallel = detail::worth_parallel(rows * s.channels * s.width);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < blocks; ++i)
    forward_rows(s, i * kRowBlock, std::min(rows, (i + 1) * kRowBlock), in, ld_in, wt.data(), bias, out, pre);
}

template <class T>
void conv_silu_backward(const ConvShape& s, const T* in, int64_t ld_in, const T* w, const T* bias,
                        const T* dout, T* din, int64_t ld_din, T* dw, T* dbias) {
  const std::vector<T> wt = taps(s, w);
  const int64_t C = s.channels, W = s.width, rows = s.batch * s.seq;
  const int64_t blocks = (rows + kBackwardRowBlock - 1) / kBackwardRowBlock;
  const bool parallel = detail::worth_parallel(rows * C * W);
  // Per part (plexus_kernels/parts.hpp: a count fixed by the size, so the sums do not depend on
  // the thread count): the ring of dv rows, then its partial weight and bias gradients, added in
  // part order afterwards.
  const int parts = plexus::kernels::reduction_parts(blocks, parallel);
  const auto per_part = static_cast<std::size_t>((2 * W + 1) * C);
  std::vector<T> scratch(per_part * static_cast<std::size_t>(parts));
#pragma omp parallel for schedule(static) if (parts > 1)
  for (int part = 0; part < parts; ++part) {
    T* ring = scratch.data() + per_part * static_cast<std::size_t>(part);
    T* dwt = ring + W * C;
    T* db = dwt + W * C;
    std::fill(dwt, dwt + (W + 1) * C, T(0));
    const plexus::kernels::PartRange mine = plexus::kernels::part_range(blocks, part, parts);
    backward_rows(s, mine.begin * kBackwardRowBlock, std::min(rows, mine.end * kBackwardRowBlock), in, ld_in,
                  wt.data(), bias, dout, din, ld_din, ring, dwt, db);
  }
  for (int part = 0; part < parts; ++part) {
    const T* dwt = scratch.data() + per_part * static_cast<std::size_t>(part) + W * C;
    const T* db = dwt + W * C;
    for (int64_t c = 0; c < C; ++c) {
      if (dbias != nullptr) dbias[c] += db[c];
      if (dw != nullptr)
        for (int64_t k = 0; k < W; ++k) dw[c * W + k] += dwt[k * C + c];
    }
  }
}

template void conv_silu_forward<float>(const ConvShape&, const float*, int64_t, const float*, const float*,
                                       float*, float*);
template void conv_silu_forward<double>(const ConvShape&, const double*, int64_t, const double*,
                                        const double*, double*, double*);
template void conv_silu_backward<float>(const ConvShape&, const float*, int64_t, const float*, const float*,
                                        const float*, float*, int64_t, float*, float*);
template void conv_silu_backward<double>(const ConvShape&, const double*, int64_t, const double*,
                                         const double*, const double*, double*, int64_t, double*, double*);

}  // namespace plexus::mamba

#include "conv.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "math.hpp"
#include "parallel.hpp"

namespace plexus::mamba {
namespace {

using detail::sigmoid;

// Rows per task of the row-parallel loops: enough work per task (thousands of channels each).
constexpr int64_t kRowBlock = 8;

// wt[k][c] = w[c][k]: the kernel taps as rows, so the loops over channels read them contiguously.
template <class T>
std::vector<T> taps(const ConvShape& s, const T* w) {
  std::vector<T> wt(static_cast<std::size_t>(s.width * s.channels));
  for (int64_t c = 0; c < s.channels; ++c)
    for (int64_t k = 0; k < s.width; ++k)
      wt[static_cast<std::size_t>(k * s.channels + c)] = w[c * s.width + k];
  return wt;
}

template <class T>
PLEXUS_KERNELS_SIMD_CLONES void forward_rows(const ConvShape& s, int64_t r0, int64_t r1, const T* in,
                                             int64_t ld_in, const T* wt, const T* bias, T* out, T* pre) {
  const int64_t C = s.channels, W = s.width;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t t = r % s.seq;
    T* o = out + r * C;
    for (int64_t c = 0; c < C; ++c) o[c] = bias[c];
    for (int64_t k = std::max<int64_t>(0, W - 1 - t); k < W; ++k) {
      const T* x = in + (r - (W - 1) + k) * ld_in;
      const T* tap = wt + k * C;
      for (int64_t c = 0; c < C; ++c) o[c] += tap[c] * x[c];
    }
    if (pre != nullptr)
      for (int64_t c = 0; c < C; ++c) pre[r * C + c] = o[c];
    for (int64_t c = 0; c < C; ++c) o[c] *= sigmoid(o[c]);
  }
}

// dv = dout silu'(v) = dout sigmoid(v) (1 + v (1 - sigmoid(v))), in place.
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void silu_grad_rows(int64_t n, const T* pre, T* d) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = pre[i], sg = sigmoid(v);
    d[i] *= sg * (T(1) + v * (T(1) - sg));
  }
}

// din[t] = sum_k dv[t + (W - 1) - k] wt[k], the taps that read token t.
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void input_grad_rows(const ConvShape& s, int64_t r0, int64_t r1, const T* dv,
                                                const T* wt, T* din, int64_t ld_din) {
  const int64_t C = s.channels, W = s.width;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t t = r % s.seq;
    T* o = din + r * ld_din;
    for (int64_t c = 0; c < C; ++c) o[c] = T(0);
    for (int64_t k = 0; k < W; ++k) {
      const int64_t reader = t + (W - 1) - k;  // the output token whose tap k reads token t
      if (reader >= s.seq) continue;
      const T* d = dv + (r + (W - 1) - k) * C;
      const T* tap = wt + k * C;
      for (int64_t c = 0; c < C; ++c) o[c] += tap[c] * d[c];
    }
  }
}

// dwt[k][c - c0] += sum_t dv[t, c] in[t - (W - 1) + k, c], db[c - c0] += sum_t dv[t, c] for the
// channels [c0, c1), over every row.
template <class T>
PLEXUS_KERNELS_SIMD_CLONES void weight_grad_channels(const ConvShape& s, int64_t c0, int64_t c1, const T* in,
                                                     int64_t ld_in, const T* dv, T* dwt, T* db) {
  const int64_t C = s.channels, W = s.width, width = c1 - c0;
  for (int64_t r = 0; r < s.batch * s.seq; ++r) {
    const int64_t t = r % s.seq;
    const T* d = dv + r * C + c0;
    for (int64_t c = 0; c < width; ++c) db[c] += d[c];
    for (int64_t k = std::max<int64_t>(0, W - 1 - t); k < W; ++k) {
      const T* x = in + (r - (W - 1) + k) * ld_in + c0;
      T* acc = dwt + k * width;
      for (int64_t c = 0; c < width; ++c) acc[c] += d[c] * x[c];
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
void conv_silu_backward(const ConvShape& s, const T* in, int64_t ld_in, const T* w, const T* pre, T* dout,
                        T* din, int64_t ld_din, T* dw, T* dbias) {
  const std::vector<T> wt = taps(s, w);
  const int64_t C = s.channels, W = s.width, rows = s.batch * s.seq;
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  const bool parallel = detail::worth_parallel(rows * C * W);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t r0 = i * kRowBlock, r1 = std::min(rows, r0 + kRowBlock);
    silu_grad_rows((r1 - r0) * C, pre + r0 * C, dout + r0 * C);
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < blocks; ++i)
    input_grad_rows(s, i * kRowBlock, std::min(rows, (i + 1) * kRowBlock), dout, wt.data(), din, ld_din);
  if (dw == nullptr && dbias == nullptr) return;

  // Weight and bias gradients: each thread owns a range of channels (a multiple of 16 wide) and
  // sums over every row, so there is nothing to reduce across threads.
  const int threads = parallel ? std::max(1, omp_get_max_threads()) : 1;
  const int64_t span = (C + threads - 1) / threads, width = (span + 15) / 16 * 16;
  const int64_t parts = (C + width - 1) / width;
  detail::PerThread<T> scratch(static_cast<std::size_t>((W + 1) * width));
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t c0 = p * width, c1 = std::min(C, c0 + width), n = c1 - c0;
    T* dwt = scratch.mine();
    T* db = dwt + W * n;
    std::fill(dwt, dwt + (W + 1) * n, T(0));
    weight_grad_channels(s, c0, c1, in, ld_in, dout, dwt, db);
    for (int64_t c = 0; c < n; ++c) {
      if (dbias != nullptr) dbias[c0 + c] += db[c];
      if (dw != nullptr)
        for (int64_t k = 0; k < W; ++k) dw[(c0 + c) * W + k] += dwt[k * n + c];
    }
  }
}

template void conv_silu_forward<float>(const ConvShape&, const float*, int64_t, const float*, const float*,
                                       float*, float*);
template void conv_silu_forward<double>(const ConvShape&, const double*, int64_t, const double*,
                                        const double*, double*, double*);
template void conv_silu_backward<float>(const ConvShape&, const float*, int64_t, const float*, const float*,
                                        float*, float*, int64_t, float*, float*);
template void conv_silu_backward<double>(const ConvShape&, const double*, int64_t, const double*,
                                         const double*, double*, double*, int64_t, double*, double*);

}  // namespace plexus::mamba

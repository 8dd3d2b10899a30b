#include "engine/vector_ops.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace plexus::vector_ops {
namespace {

// Below this many elements a loop runs on the calling thread: waking the OpenMP team costs
// microseconds, more than a short loop takes.
constexpr int64_t kParallelMin = 1 << 15;
// Reductions sum fixed chunks serially and then the chunk sums in order, so the result does not
// depend on how many threads ran.
constexpr int64_t kChunk = 1 << 14;

}  // namespace

void add_into(float* into, const float* from, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) into[i] += from[i];
}

int64_t first_non_finite(const float* values, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> first(static_cast<std::size_t>(chunks), -1);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    // A branch-free scan first; the position is only looked for in a bad chunk. v * 0 is 0 for
    // every finite v and NaN for an infinity or a NaN, so the sum is NaN exactly when the chunk
    // holds a non-finite value: plain vector multiply-adds, 4x the speed of or-ing isfinite()
    // (5.9 against 23.9 GB/s on 2 MiB here), which did not vectorize.
    float poison = 0.0f;
#pragma omp simd reduction(+ : poison)
    for (int64_t i = begin; i < end; ++i) poison += values[i] * 0.0f;
    if (!std::isnan(poison)) continue;
    for (int64_t i = begin; i < end; ++i)
      if (!std::isfinite(values[i])) {
        first[static_cast<std::size_t>(c)] = i;
        break;
      }
  }
  for (int64_t f : first)
    if (f >= 0) return f;
  return -1;
}

double sum_of_squares(const float* values, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = begin; i < end; ++i) s += static_cast<double>(values[i]) * values[i];
    partial[static_cast<std::size_t>(c)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void expand_streams(const float* e, int64_t tokens, int64_t streams, int64_t hidden, float* x) {
#pragma omp parallel for schedule(static) if (tokens * streams * hidden >= kParallelMin)
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < streams; ++j) std::copy_n(e + t * hidden, hidden, x + (t * streams + j) * hidden);
}

void sum_streams(const float* dx, int64_t tokens, int64_t streams, int64_t hidden, float* de) {
#pragma omp parallel for schedule(static) if (tokens * streams * hidden >= kParallelMin)
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = de + t * hidden;
    std::copy_n(dx + t * streams * hidden, hidden, out);
    for (int64_t j = 1; j < streams; ++j) {
      const float* in = dx + (t * streams + j) * hidden;
#pragma omp simd
      for (int64_t c = 0; c < hidden; ++c) out[c] += in[c];
    }
  }
}

void mean_streams(const float* x, int64_t tokens, int64_t streams, int64_t hidden, float* h) {
  sum_streams(x, tokens, streams, hidden, h);
  const float scale = 1.0f / static_cast<float>(streams);
  const int64_t n = tokens * hidden;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) h[i] *= scale;
}

void spread_streams(const float* dh, int64_t tokens, int64_t streams, int64_t hidden, float* dx) {
  const float scale = 1.0f / static_cast<float>(streams);
#pragma omp parallel for schedule(static) if (tokens * streams * hidden >= kParallelMin)
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < streams; ++j) {
      const float* in = dh + t * hidden;
      float* out = dx + (t * streams + j) * hidden;
#pragma omp simd
      for (int64_t c = 0; c < hidden; ++c) out[c] = in[c] * scale;
    }
}

void adamw_update(const AdamWStep& s, float* weight, const float* grad, float* exp_avg, float* exp_avg_sq,
                  int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t k = 0; k < n; ++k) {
    const float g = grad[k] * s.grad_scale;
    weight[k] -= s.decay * weight[k];
    exp_avg[k] = s.beta1 * exp_avg[k] + (1.0f - s.beta1) * g;
    exp_avg_sq[k] = s.beta2 * exp_avg_sq[k] + (1.0f - s.beta2) * g * g;
    const float denom = std::sqrt(exp_avg_sq[k]) * s.inv_sqrt_c2 + s.eps;
    weight[k] -= s.step_size * exp_avg[k] / denom;
  }
}

}  // namespace plexus::vector_ops

#include "permutation.hpp"

#include <cstring>

namespace plexus::moe {
namespace {
std::size_t sz(int64_t v) { return static_cast<std::size_t>(v); }
}  // namespace

Permutation Permutation::build(int64_t tokens, int64_t topk, int64_t experts, const int32_t* chosen,
                               const uint8_t* kept) {
  Permutation p;
  p.tokens = tokens;
  p.topk = topk;
  p.experts = experts;
  p.offsets.assign(sz(experts + 1), 0);
  const int64_t pairs = tokens * topk;
  for (int64_t i = 0; i < pairs; ++i)
    if (kept == nullptr || kept[i] != 0) ++p.offsets[sz(chosen[i] + 1)];
  for (int64_t e = 0; e < experts; ++e) p.offsets[sz(e + 1)] += p.offsets[sz(e)];
  // A counting sort, stable in token order.
  std::vector<int64_t> cursor(p.offsets.begin(), p.offsets.end() - 1);
  p.row_token.assign(sz(p.offsets.back()), 0);
  p.slot_row.assign(sz(pairs), -1);
  for (int64_t i = 0; i < pairs; ++i) {
    if (kept != nullptr && kept[i] == 0) continue;
    const int64_t r = cursor[sz(chosen[i])]++;
    p.row_token[sz(r)] = i / topk;
    p.slot_row[sz(i)] = r;
  }
  return p;
}

template <class T>
void permute_forward(const Permutation& p, int64_t cols, const T* x, T* x_perm) {
  const int64_t rows = p.rows();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(x_perm + r * cols, x + p.row_token[sz(r)] * cols, sz(cols) * sizeof(T));
}

template <class T>
void permute_backward(const Permutation& p, int64_t cols, const T* dx_perm, T* dx) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < p.tokens; ++t) {
    T* out = dx + t * cols;
    for (int64_t c = 0; c < cols; ++c) out[c] = 0;
    for (int64_t j = 0; j < p.topk; ++j) {
      const int64_t r = p.slot_row[sz(t * p.topk + j)];
      if (r < 0) continue;
      const T* in = dx_perm + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] += in[c];
    }
  }
}

template <class T>
void unpermute_forward(const Permutation& p, int64_t cols, const T* y_perm, const T* probs, T* y) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < p.tokens; ++t) {
    T* out = y + t * cols;
    for (int64_t c = 0; c < cols; ++c) out[c] = 0;
    for (int64_t j = 0; j < p.topk; ++j) {
      const int64_t r = p.slot_row[sz(t * p.topk + j)];
      if (r < 0) continue;
      const T w = probs[t * p.topk + j];
      const T* in = y_perm + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] += w * in[c];
    }
  }
}

template <class T>
void unpermute_backward(const Permutation& p, int64_t cols, const T* dy, const T* y_perm, const T* probs,
                        T* dy_perm, T* dprobs) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < p.tokens; ++t) {
    const T* g = dy + t * cols;
    for (int64_t j = 0; j < p.topk; ++j) {
      const int64_t r = p.slot_row[sz(t * p.topk + j)];
      if (r < 0) {
        dprobs[t * p.topk + j] = 0;
        continue;
      }
      const T w = probs[t * p.topk + j];
      const T* yr = y_perm + r * cols;
      T* dr = dy_perm + r * cols;
      T dot = 0;
      for (int64_t c = 0; c < cols; ++c) {
        dr[c] = w * g[c];
        dot += g[c] * yr[c];
      }
      dprobs[t * p.topk + j] = dot;
    }
  }
}

#define PLEXUS_MOE_PERMUTATION(T)                                                                     \
  template void permute_forward<T>(const Permutation&, int64_t, const T*, T*);                       \
  template void permute_backward<T>(const Permutation&, int64_t, const T*, T*);                      \
  template void unpermute_forward<T>(const Permutation&, int64_t, const T*, const T*, T*);           \
  template void unpermute_backward<T>(const Permutation&, int64_t, const T*, const T*, const T*, T*, \
                                      T*);
PLEXUS_MOE_PERMUTATION(float)
PLEXUS_MOE_PERMUTATION(double)
#undef PLEXUS_MOE_PERMUTATION

}  // namespace plexus::moe

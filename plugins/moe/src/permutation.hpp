// The token permutation: the T*k (token, choice) pairs sorted by expert, so that every expert's
// tokens form one contiguous block of rows and the experts run as one grouped product over
// those blocks. Within an expert the rows keep token order (Megatron-LM's permute). Kept apart
// from the experts' arithmetic: with expert parallelism the dispatch all-to-all moves these
// blocks between the permutation and the experts.
#pragma once

#include <cstdint>
#include <vector>

namespace plexus::moe {

struct Permutation {
  int64_t tokens = 0, topk = 0, experts = 0;
  std::vector<int64_t> offsets;    // [E + 1]: expert e owns rows [offsets[e], offsets[e + 1])
  std::vector<int64_t> row_token;  // [rows]: the token a row holds
  std::vector<int64_t> slot_row;   // [T * k]: the row of (token t, choice j) at t * k + j; -1: dropped

  int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
  int64_t rows_of(int64_t e) const { return offsets[static_cast<std::size_t>(e + 1)] - offsets[static_cast<std::size_t>(e)]; }

  // chosen: [T, k] expert ids (each in [0, E)); kept: [T, k], 0 for a pair the expert's capacity
  // dropped (it gets no row), or null (dropless).
  static Permutation build(int64_t tokens, int64_t topk, int64_t experts, const int32_t* chosen,
                           const uint8_t* kept);
};

// x_perm[r] = x[row_token[r]]   (x: [T, C], x_perm: [rows, C])
template <class T>
void permute_forward(const Permutation& p, int64_t cols, const T* x, T* x_perm);
// dx[t] = sum_j dx_perm[slot_row[t k + j]]   (written; dropped pairs add nothing)
template <class T>
void permute_backward(const Permutation& p, int64_t cols, const T* dx_perm, T* dx);
// y[t] = sum_j probs[t, j] y_perm[slot_row[t k + j]]   (written)
template <class T>
void unpermute_forward(const Permutation& p, int64_t cols, const T* y_perm, const T* probs, T* y);
// dy_perm[r] = probs[t, j] dy[t]  and  dprobs[t, j] = dy[t] . y_perm[r]   for r = slot_row[t k + j];
// a dropped pair's dprobs is 0 (its probability does not reach the output)
template <class T>
void unpermute_backward(const Permutation& p, int64_t cols, const T* dy, const T* y_perm, const T* probs,
                        T* dy_perm, T* dprobs);

}  // namespace plexus::moe

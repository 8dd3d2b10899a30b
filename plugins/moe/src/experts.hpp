// The experts: E MLPs (GeLU, or SwiGLU with fc1 holding [gate; up]) run as one grouped product
// over the permuted rows, expert e on its contiguous block of rows [offsets[e], offsets[e + 1])
// (Permutation::offsets), each block one matrix product per weight through plexus_kernels. The
// activation runs over all rows at once. The shared experts are the same computation with one
// block holding every token.
#pragma once

#include <cstdint>
#include <vector>

#include "plexus_kernels/buffer.hpp"

namespace plexus::moe {

// The sizes of one expert MLP.
struct MlpShape {
  int64_t hidden = 0, ffn = 0;
  bool swiglu = false;
  int64_t fc1_rows() const { return swiglu ? 2 * ffn : ffn; }
};

template <class T>
struct ExpertWeights {
  std::vector<const T*> fc1, fc2;  // per expert: [fc1_rows, C] and [C, F]
};
template <class T>
struct ExpertGrads {
  std::vector<T*> fc1, fc2;  // per expert, accumulated into; an entry may be null (not wanted)
};

struct ExpertsSaved {
  plexus::kernels::Buffer a;    // [rows, fc1_rows]: fc1's output
  plexus::kernels::Buffer act;  // [rows, F]
};

// y [rows, C] from x [rows, C]; offsets has one more entry than there are experts.
template <class T>
void experts_forward(const MlpShape& shape, const std::vector<int64_t>& offsets, const ExpertWeights<T>& w,
                     const T* x, ExpertsSaved& s, T* y);
// Backward in two parts, so the weight gradients can come later (backward_weights): the input
// gradient dx [rows, C] (written) from dy, keeping fc1's output gradient in `da`; then the weight
// gradients accumulated (dW2 += dy^T act, dW1 += da^T x) from what the first part kept. Each
// weight gets the same products in either order, so splitting changes no bit.
template <class T>
void experts_backward_inputs(const MlpShape& shape, const std::vector<int64_t>& offsets, const ExpertWeights<T>& w,
                             const ExpertsSaved& s, const T* dy, T* dx, plexus::kernels::Buffer& da);
template <class T>
void experts_backward_weights(const MlpShape& shape, const std::vector<int64_t>& offsets, const ExpertGrads<T>& g,
                              const ExpertsSaved& s, const T* x, const T* dy, const plexus::kernels::Buffer& da);

}  // namespace plexus::moe

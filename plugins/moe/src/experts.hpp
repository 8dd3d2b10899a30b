// The experts: E MLPs (GeLU, or SwiGLU with fc1 holding [gate; up]) run as one grouped product
// over the permuted rows, expert e on its contiguous block of rows (Permutation::offsets), each
// block one matrix product per weight through plexus_kernels. The activation runs over all rows
// at once.
#pragma once

#include <cstdint>
#include <vector>

#include "config.hpp"
#include "permutation.hpp"
#include "plexus_kernels/buffer.hpp"

namespace plexus::moe {

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

// y_perm [rows, C] from x_perm [rows, C].
template <class T>
void experts_forward(const MoeConfig& c, const Permutation& p, const ExpertWeights<T>& w, const T* x_perm,
                     ExpertsSaved& s, T* y_perm);
// dx_perm [rows, C] (written) from dy_perm; the weight gradients accumulated.
template <class T>
void experts_backward(const MoeConfig& c, const Permutation& p, const ExpertWeights<T>& w,
                      const ExpertGrads<T>& g, const ExpertsSaved& s, const T* x_perm, const T* dy_perm,
                      T* dx_perm);

}  // namespace plexus::moe

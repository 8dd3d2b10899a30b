// The shapes and views mixer_forward and mixer_backward hand to their parts, derived from the
// configuration in one place.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "conv.hpp"
#include "gated_norm.hpp"
#include "ssd.hpp"

namespace plexus::mamba {

inline SsdShape ssd_shape(const MixerConfig& c, int64_t batch, int64_t seq) {
  SsdShape s;
  s.batch = batch;
  s.seq = seq;
  s.heads = c.heads;
  s.head_dim = c.head_dim;
  s.groups = c.groups;
  s.state_dim = c.state_dim;
  s.chunk = c.chunk;
  return s;
}

inline ConvShape conv_shape(const MixerConfig& c, int64_t batch, int64_t seq) {
  return ConvShape{batch, seq, c.conv_dim(), c.conv_width};
}

inline GatedNormShape gated_norm_shape(const MixerConfig& c, int64_t rows) {
  return GatedNormShape{rows, c.d_inner, c.groups, c.norm_eps};
}

// x, B and C within the convolution's output rows [x | B | C]; D, the skip's weight per head.
template <class T>
SsdInputs<T> ssd_inputs(const MixerConfig& c, const T* xbc, const T* dt, const T* A, const T* D) {
  SsdInputs<T> in;
  in.x = xbc;
  in.B = xbc + c.d_inner;
  in.C = xbc + c.d_inner + c.groups * c.state_dim;
  in.ld = c.conv_dim();
  in.dt = dt;
  in.A = A;
  in.D = D;
  return in;
}

// A = -exp(A_log), per head.
template <class T>
std::vector<T> decay_rates(const MixerConfig& c, const T* a_log) {
  std::vector<T> A(static_cast<std::size_t>(c.heads));
  for (int64_t h = 0; h < c.heads; ++h) A[static_cast<std::size_t>(h)] = -std::exp(a_log[h]);
  return A;
}

}  // namespace plexus::mamba

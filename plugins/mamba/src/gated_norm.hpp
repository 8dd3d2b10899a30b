// The mixer's output gate and grouped RMSNorm (Megatron's ExtendedRMSNorm with norm_before_gate
// false, i.e. mamba_ssm's RMSNormGated(y, z)): per row of d_inner values, split into G groups,
//   g = y silu(z);  r = 1 / sqrt(mean over the group of g^2 + eps);  o = g r w.
// Rows are tokens; z is read with its own row stride (a column block of the in_proj output).
#pragma once

#include <cstdint>

namespace plexus::mamba {

struct GatedNormShape {
  int64_t rows = 0, width = 0, groups = 0;  // width = d_inner, a multiple of groups
  double eps = 1e-5;
};

// o [rows, width] written; rstd [rows, groups] written (may be null: no backward follows).
template <class T>
void gated_norm_forward(const GatedNormShape& s, const T* y, const T* z, int64_t ld_z, const T* w, T* o,
                        T* rstd);

// o again from the rstd a forward kept.
template <class T>
void gated_norm_output(const GatedNormShape& s, const T* y, const T* z, int64_t ld_z, const T* rstd,
                       const T* w, T* o);

// do [rows, width]: the gradient of o. Writes dy [rows, width] and dz [rows, ld_dz] (width
// columns); accumulates dw [width] (may be null).
template <class T>
void gated_norm_backward(const GatedNormShape& s, const T* d_out, const T* y, const T* z, int64_t ld_z,
                         const T* rstd, const T* w, T* dy, T* dz, int64_t ld_dz, T* dw);

}  // namespace plexus::mamba

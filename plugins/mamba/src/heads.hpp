// The per-head elementwise parts of the mixer: the step size dt = softplus(dt_raw + dt_bias) and
// the skip connection D x, forward and backward. Rows are tokens.
#pragma once

#include <cstdint>

namespace plexus::mamba {

// dt[r, h] = softplus(raw[r * ld_raw + h] + bias[h]) (linear above 20), [rows, heads] written.
template <class T>
void dt_forward(int64_t rows, int64_t heads, const T* raw, int64_t ld_raw, const T* bias, T* dt);

// From ddt [rows, heads]: d_raw[r * ld_draw + h] = ddt softplus'(raw + bias) (written) and
// dbias[h] += the sum over rows (dbias may be null).
template <class T>
void dt_backward(int64_t rows, int64_t heads, const T* raw, int64_t ld_raw, const T* bias, const T* ddt,
                 T* d_raw, int64_t ld_draw, T* dbias);

// y[r, h P + p] += D[h] x[r * ld_x + h P + p] over [rows, heads * head_dim] (y contiguous).
template <class T>
void skip_forward(int64_t rows, int64_t heads, int64_t head_dim, const T* D, const T* x, int64_t ld_x, T* y);

// dx[r * ld_dx + h P + p] += D[h] dy[r, h P + p]; dD[h] += sum of x dy over rows and p (dD may
// be null).
template <class T>
void skip_backward(int64_t rows, int64_t heads, int64_t head_dim, const T* D, const T* x, int64_t ld_x,
                   const T* dy, T* dx, int64_t ld_dx, T* dD);

}  // namespace plexus::mamba

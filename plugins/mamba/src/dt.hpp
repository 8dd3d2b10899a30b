// The step size of every head, dt = softplus(dt_raw + dt_bias), forward and backward. Rows are
// tokens.
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

}  // namespace plexus::mamba

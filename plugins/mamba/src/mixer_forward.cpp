// mamba.mixer's forward on the CPU (mixer.hpp).
#include <cmath>
#include <vector>

#include "conv.hpp"
#include "dt.hpp"
#include "gated_norm.hpp"
#include "mixer.hpp"
#include "mixer_shapes.hpp"
#include "plexus_kernels/gemm.hpp"
#include "plexus_kernels/norm.hpp"
#include "ssd.hpp"

namespace plexus::mamba {

namespace k = plexus::kernels;
using k::Trans;

template <class T>
void mixer_forward(const MixerConfig& c, const MixerWeights<T>& w, int64_t batch, int64_t seq, const T* h,
                   T* out, MixerState* keep) {
  const int64_t rows = batch * seq, dm = c.d_model, R = c.in_proj_rows(), cd = c.conv_dim(), di = c.d_inner;
  const auto n = [](int64_t v) { return static_cast<std::size_t>(v); };
  const SsdShape ssd = ssd_shape(c, batch, seq);
  Pooled u_buf, zx_local, xbc_buf, dt_buf, y_local, states_local, o_buf;

  // Pre-norm, then in_proj: zxbcdt = u W_in^T, rows [z, x, B, C, dt].
  T* u = u_buf.get<T>(n(rows * dm));
  T* xhat = keep != nullptr ? keep->xhat.get<T>(n(rows * dm)) : nullptr;
  T* rstd = keep != nullptr ? keep->rstd.get<T>(n(rows)) : nullptr;
  if (c.rms_prenorm)
    k::rmsnorm_forward<T>(rows, dm, h, w.norm_weight, static_cast<T>(c.prenorm_eps), u, xhat, rstd);
  else
    k::layernorm_forward<T>(rows, dm, h, w.norm_weight, w.norm_bias, static_cast<T>(c.prenorm_eps), u, xhat,
                            rstd);
  T* zx = (keep != nullptr ? keep->zxbcdt : zx_local).get<T>(n(rows * R));
  k::gemm_parallel<T>(Trans::N, Trans::T, rows, R, dm, T(1), u, dm, w.in_proj, dm, T(0), zx, R);

  // x, B, C through the causal convolution and SiLU; dt through softplus; A = -exp(A_log).
  T* xbc = xbc_buf.get<T>(n(rows * cd));
  conv_silu_forward<T>(conv_shape(c, batch, seq), zx + c.xbc_offset(), R, w.conv_weight, w.conv_bias, xbc,
                       nullptr);
  T* dt = dt_buf.get<T>(n(rows * c.heads));
  dt_forward<T>(rows, c.heads, zx + c.dt_offset(), R, w.dt_bias, dt);
  const std::vector<T> A = decay_rates(c, w.a_log);

  // y = SSD(x, dt, A, B, C) + D x.
  T* y = (keep != nullptr ? keep->y : y_local).get<T>(n(rows * di));
  T* states = (keep != nullptr ? keep->states : states_local).get<T>(n(ssd.states_size()));
  ssd_forward<T>(ssd, ssd_inputs(c, xbc, dt, A.data(), w.d), y, di, states);

  // Gate, grouped RMSNorm, out_proj.
  T* o = o_buf.get<T>(n(rows * di));
  gated_norm_forward<T>(gated_norm_shape(c, rows), y, zx, R, w.gated_norm_weight, o,
                        keep != nullptr ? keep->gate_rstd.get<T>(n(rows * c.groups)) : nullptr);
  k::gemm_parallel<T>(Trans::N, Trans::T, rows, dm, di, T(1), o, di, w.out_proj, di, T(0), out, dm);

  if (keep != nullptr) {
    keep->saved = true;
    keep->precision = precision_v<T>;
    keep->batch = batch;
    keep->seq = seq;
  }
}

template void mixer_forward<float>(const MixerConfig&, const MixerWeights<float>&, int64_t, int64_t,
                                   const float*, float*, MixerState*);
template void mixer_forward<double>(const MixerConfig&, const MixerWeights<double>&, int64_t, int64_t,
                                    const double*, double*, MixerState*);

int64_t mixer_saved_elements(const MixerConfig& c, int64_t batch, int64_t seq) {
  const int64_t rows = batch * seq;
  return rows * (c.d_model + 1 + c.in_proj_rows() + c.d_inner + c.groups) +
         ssd_shape(c, batch, seq).states_size();
}

MixerFlops mixer_flops(const MixerConfig& c, int64_t batch, int64_t seq) {
  const double rows = static_cast<double>(batch) * static_cast<double>(seq);
  const double dm = static_cast<double>(c.d_model), di = static_cast<double>(c.d_inner);
  const double projections = 2 * rows * dm * (static_cast<double>(c.in_proj_rows()) + di);
  const SsdFlops ssd = ssd_flops(ssd_shape(c, batch, seq));
  // Backward: each projection's input gradient and weight gradient.
  return MixerFlops{projections + ssd.forward, 2 * projections + ssd.backward};
}

}  // namespace plexus::mamba

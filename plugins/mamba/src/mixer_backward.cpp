// mamba.mixer's backward on the CPU (mixer.hpp): the forward's steps in reverse, recomputing the
// convolution, softplus, gate and norm output from what the forward kept.
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
void mixer_backward(const MixerConfig& c, const MixerWeights<T>& w, const MixerGrads<T>& g,
                    const MixerState& st, const T* dout, T* dh, const plexus::sdk::Group& tp) {
  const int64_t batch = st.batch, seq = st.seq, rows = batch * seq;
  const int64_t dm = c.d_model, R = c.in_proj_rows(), cd = c.conv_dim(), di = c.d_inner, H = c.heads;
  const auto n = [](int64_t v) { return static_cast<std::size_t>(v); };
  const T* zx = st.zxbcdt.data<T>();
  const T* y = st.y.data<T>();
  const T* gate_rstd = st.gate_rstd.data<T>();
  Pooled xbc_buf, dt_buf, o_buf, dy_buf, dzx_buf, dxbc_buf, ddt_buf, u_buf, du_buf;

  // Recomputed: the convolution's output (its backward recomputes the rest), dt and A.
  T* xbc = xbc_buf.get<T>(n(rows * cd));
  conv_silu_forward<T>(conv_shape(c, batch, seq), zx + c.xbc_offset(), R, w.conv_weight, w.conv_bias, xbc,
                       static_cast<T*>(nullptr));
  T* dt = dt_buf.get<T>(n(rows * H));
  dt_forward<T>(rows, H, zx + c.dt_offset(), R, w.dt_bias, dt);
  const std::vector<T> A = decay_rates(c, w.a_log);

  // out = o W_out^T: dW_out += dout^T o (o recomputed), do = dout W_out.
  T* o = o_buf.get<T>(n(rows * di));
  const GatedNormShape gs = gated_norm_shape(c, rows);
  if (g.out_proj != nullptr) {
    gated_norm_output<T>(gs, y, zx, R, gate_rstd, w.gated_norm_weight, o);
    k::gemm_parallel<T>(Trans::T, Trans::N, dm, di, rows, T(1), dout, dm, o, di, T(1), g.out_proj, di);
  }
  T* d_o = o;
  k::gemm_parallel<T>(Trans::N, Trans::N, rows, di, dm, T(1), dout, dm, w.out_proj, di, T(0), d_o, di);

  // The gate and grouped norm: dy, and dz into the z columns of the in_proj output's gradient.
  T* dzx = dzx_buf.get<T>(n(rows * R));
  T* dy = dy_buf.get<T>(n(rows * di));
  gated_norm_backward<T>(gs, d_o, y, zx, R, gate_rstd, w.gated_norm_weight, dy, dzx, R, g.gated_norm_weight);

  // The SSD and D skip: dx, dB, dC (in the convolution output's layout), ddt, dA, dD.
  T* dxbc = dxbc_buf.get<T>(n(rows * cd));
  T* ddt = ddt_buf.get<T>(n(rows * H));
  std::vector<T> dA(n(H)), dD(n(H));
  const SsdInputs<T> in = ssd_inputs(c, static_cast<const T*>(xbc), static_cast<const T*>(dt), A.data(), w.d);
  ssd_backward<T>(ssd_shape(c, batch, seq), in, st.states.data<T>(), dy, di, dxbc, dxbc + di,
                  dxbc + di + c.groups * c.state_dim, cd, ddt, dA.data(), dD.data());
  if (g.d != nullptr)
    for (int64_t h = 0; h < H; ++h) g.d[h] += dD[n(h)];
  if (g.a_log != nullptr)  // A = -exp(A_log): dA/dA_log = A
    for (int64_t h = 0; h < H; ++h) g.a_log[h] += dA[n(h)] * A[n(h)];

  // softplus, into the dt columns; the convolution and SiLU, into the x, B, C columns.
  dt_backward<T>(rows, H, zx + c.dt_offset(), R, w.dt_bias, ddt, dzx + c.dt_offset(), R, g.dt_bias);
  conv_silu_backward<T>(conv_shape(c, batch, seq), zx + c.xbc_offset(), R, w.conv_weight, w.conv_bias, dxbc,
                        dzx + c.xbc_offset(), R, g.conv_weight, g.conv_bias);

  // in_proj: du = dzx W_in, summed over tp (each rank's rows are its heads'), while dW_in +=
  // dzx^T u (u recomputed from the norm's xhat) is computed; then the pre-norm.
  const bool norm_backward = dh != nullptr || g.norm_weight != nullptr || g.norm_bias != nullptr;
  T* du = norm_backward ? du_buf.get<T>(n(rows * dm)) : nullptr;
  plx_request du_summed = nullptr;
  if (norm_backward) {
    k::gemm_parallel<T>(Trans::N, Trans::N, rows, dm, R, T(1), dzx, R, w.in_proj, dm, T(0), du, dm);
    int64_t shape[2] = {rows, dm};
    DLTensor view{du, DLDevice{kDLCPU, 0}, 2, dtype_of(precision_v<T>), shape, nullptr, 0};
    du_summed = tp.start_all_reduce(view);
  }
  if (g.in_proj != nullptr) {
    T* u = u_buf.get<T>(n(rows * dm));
    k::norm_apply<T>(rows, dm, st.xhat.data<T>(), w.norm_weight, c.rms_prenorm ? nullptr : w.norm_bias, u);
    k::gemm_parallel<T>(Trans::T, Trans::N, R, dm, rows, T(1), dzx, R, u, dm, T(1), g.in_proj, dm);
  }
  tp.finish(du_summed);
  if (!norm_backward) return;
  if (c.rms_prenorm)
    k::rmsnorm_backward<T>(rows, dm, du, st.xhat.data<T>(), st.rstd.data<T>(), w.norm_weight, dh,
                           g.norm_weight);
  else
    k::layernorm_backward<T>(rows, dm, du, st.xhat.data<T>(), st.rstd.data<T>(), w.norm_weight, dh,
                             g.norm_weight, g.norm_bias);
}

template void mixer_backward<float>(const MixerConfig&, const MixerWeights<float>&, const MixerGrads<float>&,
                                    const MixerState&, const float*, float*, const plexus::sdk::Group&);
template void mixer_backward<double>(const MixerConfig&, const MixerWeights<double>&,
                                     const MixerGrads<double>&, const MixerState&, const double*, double*,
                                     const plexus::sdk::Group&);

}  // namespace plexus::mamba

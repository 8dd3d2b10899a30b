// mamba.mixer's backward on the GPU (mixer_cuda.hpp), the CPU's mixer_backward.cpp step for step:
// the forward's steps in reverse, recomputing the convolution, softplus, gate and norm output
// from what the forward kept. Parameter gradients are accumulated (+=) as on the CPU; the column
// sums behind the vector gradients are two-pass and in a fixed order (no atomics).
#include "cuda/kernels.hpp"
#include "cuda/mixer_cuda.hpp"
#include "cuda/ssd_cuda.hpp"
#include "mixer_shapes.hpp"
#include "plexus_cuda_kernels/gemm.hpp"
#include "plexus_cuda_kernels/norm.hpp"

namespace plexus::mamba::cuda {

namespace ck = plexus::cuda_kernels;
using ck::Trans;

void mixer_backward(const MixerConfig& c, const MixerWeights<float>& w, const MixerGrads<float>& g,
                    int64_t batch, int64_t seq, const Kept& kept, const float* dout, float* dh, Call& call) {
  const int64_t rows = batch * seq, dm = c.d_model, R = c.in_proj_rows(), cd = c.conv_dim(), di = c.d_inner;
  const int64_t H = c.heads;
  ck::Handle& handle = call.handle;
  cudaStream_t stream = call.stream;
  const float* zx = kept.zxbcdt;

  // Recomputed: the convolution's output (its backward recomputes the rest), dt and A.
  const ConvShape conv = conv_shape(c, batch, seq);
  float* xbc = call.take(rows * cd);
  conv_silu_forward(conv, zx + c.xbc_offset(), R, w.conv_weight, w.conv_bias, xbc, stream);
  float* dt = call.take(rows * H);
  dt_forward(rows, H, zx + c.dt_offset(), R, w.dt_bias, dt, stream);
  float* A = call.take(H);
  decay_rates(H, w.a_log, A, stream);

  // out = o W_out^T: dW_out += dout^T o (o recomputed), do = dout W_out.
  float* o = call.take(rows * di);
  const GatedNormShape gs = gated_norm_shape(c, rows);
  if (g.out_proj != nullptr) {
    gated_norm_forward(gs, kept.y, zx, R, w.gated_norm_weight, kept.gate_rstd, o, nullptr, stream);
    ck::gemm<float, float>(handle, Trans::T, Trans::N, dm, di, rows, 1.0f, dout, dm, o, di, 1.0f, g.out_proj,
                           di);
  }
  float* d_o = o;
  ck::gemm<float, float>(handle, Trans::N, Trans::N, rows, di, dm, 1.0f, dout, dm, w.out_proj, di, 0.0f, d_o,
                         di);

  // The gate and grouped norm: dy, and dz into the z columns of the in_proj output's gradient.
  float* dzx = call.take(rows * R);
  float* dy = call.take(rows * di);
  float* dw_terms = g.gated_norm_weight != nullptr ? call.take(rows * di) : nullptr;
  gated_norm_backward(gs, d_o, kept.y, zx, R, kept.gate_rstd, w.gated_norm_weight, dy, dzx, R, dw_terms,
                      stream);
  if (dw_terms != nullptr)
    column_sums_add(rows, di, dw_terms, di, call.take(column_partials(rows, di)), g.gated_norm_weight,
                    stream);

  // The SSD and D skip: dx, dB, dC (in the convolution output's layout), ddt, dA, dD.
  float* dxbc = call.take(rows * cd);
  float* ddt = call.take(rows * H);
  float* dA = call.take(H);
  float* dD = call.take(H);
  ssd_backward(ssd_shape(c, batch, seq), SsdTensors{xbc, cd, dt, A, w.d}, kept.states, dy, di, dxbc, ddt, dA,
               dD, call);
  add_head_grads(H, dA, dD, A, g.a_log, g.d, stream);

  // softplus, into the dt columns (dt_bias: their column sums); the convolution and SiLU, into
  // the x, B, C columns.
  dt_backward(rows, H, zx + c.dt_offset(), R, w.dt_bias, ddt, dzx + c.dt_offset(), R, stream);
  if (g.dt_bias != nullptr)
    column_sums_add(rows, H, dzx + c.dt_offset(), R, call.take(column_partials(rows, H)), g.dt_bias, stream);
  float* conv_partial =
      g.conv_weight != nullptr || g.conv_bias != nullptr ? call.take(conv_partials(conv)) : nullptr;
  conv_silu_backward(conv, zx + c.xbc_offset(), R, w.conv_weight, w.conv_bias, dxbc, dzx + c.xbc_offset(), R,
                     g.conv_weight, g.conv_bias, conv_partial, stream);

  // in_proj: dW_in += dzx^T u (u recomputed from the norm's xhat), du = dzx W_in; the pre-norm.
  float* u = call.take(rows * dm);
  if (g.in_proj != nullptr) {
    ck::norm_apply<float>(rows, dm, kept.xhat, w.norm_weight, c.rms_prenorm ? nullptr : w.norm_bias, u,
                          stream);
    ck::gemm<float, float>(handle, Trans::T, Trans::N, R, dm, rows, 1.0f, dzx, R, u, dm, 1.0f, g.in_proj, dm);
  }
  if (dh == nullptr && g.norm_weight == nullptr && g.norm_bias == nullptr) return;
  float* du = u;
  ck::gemm<float, float>(handle, Trans::N, Trans::N, rows, dm, R, 1.0f, dzx, R, w.in_proj, dm, 0.0f, du, dm);
  if (c.rms_prenorm)
    ck::rmsnorm_backward<float>(handle, rows, dm, du, kept.xhat, kept.rstd, w.norm_weight, dh, g.norm_weight);
  else
    ck::layernorm_backward<float>(handle, rows, dm, du, kept.xhat, kept.rstd, w.norm_weight, dh,
                                  g.norm_weight, g.norm_bias);
}

}  // namespace plexus::mamba::cuda

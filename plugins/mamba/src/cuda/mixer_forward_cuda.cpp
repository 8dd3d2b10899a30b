// mamba.mixer's forward on the GPU (mixer_cuda.hpp), the CPU's mixer_forward.cpp step for step.
#include "cuda/kernels.hpp"
#include "cuda/mixer_cuda.hpp"
#include "cuda/ssd_cuda.hpp"
#include "mixer_shapes.hpp"
#include "plexus_cuda_kernels/gemm.hpp"
#include "plexus_cuda_kernels/norm.hpp"

namespace plexus::mamba::cuda {

namespace ck = plexus::cuda_kernels;
using ck::Trans;

void mixer_forward(const MixerConfig& c, const MixerWeights<float>& w, int64_t batch, int64_t seq,
                   const float* h, float* out, Kept* keep, plexus::cuda_layer::Arena* memory, Call& call) {
  const int64_t rows = batch * seq, dm = c.d_model, R = c.in_proj_rows(), cd = c.conv_dim(), di = c.d_inner;
  const SsdShape ssd = ssd_shape(c, batch, seq);
  cudaStream_t stream = call.stream;
  // Kept tensors come from the state's memory, the rest from the call's.
  const auto kept = [&](int64_t n) {
    return keep != nullptr ? memory->take<float>(static_cast<std::size_t>(n), stream) : call.take(n);
  };

  // Pre-norm, then in_proj: zxbcdt = u W_in^T, rows [z, x, B, C, dt].
  float* u = call.take(rows * dm);
  float* xhat = keep != nullptr ? kept(rows * dm) : nullptr;
  float* rstd = keep != nullptr ? kept(rows) : nullptr;
  const auto eps = static_cast<float>(c.prenorm_eps);  // rounded as the CPU's float32 path rounds it
  if (c.rms_prenorm)
    ck::rmsnorm_forward<float>(rows, dm, h, w.norm_weight, eps, u, xhat, rstd, stream);
  else
    ck::layernorm_forward<float>(rows, dm, h, w.norm_weight, w.norm_bias, eps, u, xhat, rstd, stream);
  float* zx = kept(rows * R);
  ck::gemm<float, float>(call.handle, Trans::N, Trans::T, rows, R, dm, 1.0f, u, dm, w.in_proj, dm, 0.0f, zx,
                         R);

  // x, B, C through the causal convolution and SiLU; dt through softplus; A = -exp(A_log).
  float* xbc = call.take(rows * cd);
  conv_silu_forward(conv_shape(c, batch, seq), zx + c.xbc_offset(), R, w.conv_weight, w.conv_bias, xbc,
                    stream);
  float* dt = call.take(rows * c.heads);
  dt_forward(rows, c.heads, zx + c.dt_offset(), R, w.dt_bias, dt, stream);
  float* A = call.take(c.heads);
  decay_rates(c.heads, w.a_log, A, stream);

  // y = SSD(x, dt, A, B, C) + D x.
  float* y = kept(rows * di);
  float* states = kept(ssd.states_size());
  ssd_forward(ssd, SsdTensors{xbc, cd, dt, A, w.d}, y, di, states, call);

  // Gate, grouped RMSNorm, out_proj.
  float* o = call.take(rows * di);
  float* gate_rstd = keep != nullptr ? kept(rows * c.groups) : nullptr;
  gated_norm_forward(gated_norm_shape(c, rows), y, zx, R, w.gated_norm_weight, nullptr, o, gate_rstd, stream);
  ck::gemm<float, float>(call.handle, Trans::N, Trans::T, rows, dm, di, 1.0f, o, di, w.out_proj, di, 0.0f,
                         out, dm);

  if (keep != nullptr) *keep = Kept{xhat, rstd, zx, y, gate_rstd, states};
}

}  // namespace plexus::mamba::cuda

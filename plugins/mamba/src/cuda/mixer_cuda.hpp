// The whole layer F on the GPU in float32, forward and hand-written backward: mixer_forward.cpp
// and mixer_backward.cpp step for step, with the products through plexus_cuda_kernels' gemm, the
// pre-norm through its RMSNorm / LayerNorm, and the rest through this folder's kernels.
#pragma once

#include <cstdint>

#include "config.hpp"
#include "cuda/call.hpp"
#include "mixer.hpp"
#include "plexus_cuda_layer/arena.hpp"

namespace plexus::mamba::cuda {

// What a training forward keeps for its backward, in the state's device memory: the CPU path's
// tensors (mixer.hpp), float32: xhat [rows, d_model], rstd [rows], zxbcdt [rows, in_proj_rows],
// y [rows, d_inner], gate_rstd [rows, groups], states [heads, batch * chunks, head_dim,
// state_dim].
struct Kept {
  float* xhat = nullptr;
  float* rstd = nullptr;
  float* zxbcdt = nullptr;
  float* y = nullptr;
  float* gate_rstd = nullptr;
  float* states = nullptr;
};

// h, out: [batch, seq, d_model] on the device. keep (with `memory`, where it is allocated): what a
// training forward keeps; null for inference (everything is then a temporary of the call).
void mixer_forward(const MixerConfig& config, const MixerWeights<float>& w, int64_t batch, int64_t seq,
                   const float* h, float* out, Kept* keep, plexus::cuda_layer::Arena* memory, Call& call);

// dh written (may be null), the gradients accumulated (each may be null).
void mixer_backward(const MixerConfig& config, const MixerWeights<float>& w, const MixerGrads<float>& grads,
                    int64_t batch, int64_t seq, const Kept& kept, const float* dout, float* dh, Call& call);

}  // namespace plexus::mamba::cuda

// The whole layer F on the CPU: pre-norm, in_proj, causal conv + SiLU, softplus, the chunked SSD,
// D skip, gate and grouped RMSNorm, out_proj; forward and hand-written backward, float32 and
// float64. mixer_layer.cpp checks the tensors and calls these.
#pragma once

#include <cstdint>

#include "checks.hpp"
#include "config.hpp"
#include "plexus/cpp/group.hpp"
#include "plexus/cpp/layer.hpp"
#include "workspace.hpp"

namespace plexus::mamba {

// What every state of the layer records of its last forward, on the CPU or a GPU: the checks of
// a backward (mixer_layer.cpp) read it. A forward that fails or does not train leaves saved false.
class MixerStateBase : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
};

// What a training forward on the CPU keeps for its backward (per token, in the activations'
// dtype): d_model + 1 (the pre-norm's normalized input and 1/rms), the in_proj output (z, x, B, C
// and dt before the convolution: 2 d_inner + 2 G N + H), y = SSD + D x (d_inner), the gated
// norm's 1/rms per group (G), and the state entering every chunk (H P N per chunk, i.e. H P N / Q
// per token). The convolution, SiLU, softplus and gate are recomputed from these.
class MixerState : public MixerStateBase {
 public:
  Pooled xhat, rstd, zxbcdt, y, gate_rstd, states;
};

// Parameter values (float32 or float64 like the activations), in the layer's order.
template <class T>
struct MixerWeights {
  const T* norm_weight = nullptr;
  const T* norm_bias = nullptr;  // LayerNorm only
  const T* in_proj = nullptr;
  const T* conv_weight = nullptr;
  const T* conv_bias = nullptr;
  const T* dt_bias = nullptr;
  const T* a_log = nullptr;
  const T* d = nullptr;
  const T* gated_norm_weight = nullptr;
  const T* out_proj = nullptr;
};

// Parameter gradients, accumulated (+=); a null one is not wanted.
template <class T>
struct MixerGrads {
  T* norm_weight = nullptr;
  T* norm_bias = nullptr;
  T* in_proj = nullptr;
  T* conv_weight = nullptr;
  T* conv_bias = nullptr;
  T* dt_bias = nullptr;
  T* a_log = nullptr;
  T* d = nullptr;
  T* gated_norm_weight = nullptr;
  T* out_proj = nullptr;
};

// h, out: [batch, seq, d_model]. keep: the state to fill for backward, or null (inference).
template <class T>
void mixer_forward(const MixerConfig& config, const MixerWeights<T>& w, int64_t batch, int64_t seq,
                   const T* h, T* out, MixerState* keep);

// From the gradient of the output, dout: dh (written; may be null) and the parameter gradients.
// Under tensor parallelism (config.tp > 1) the pre-norm output's gradient is this rank's heads'
// part: it is summed over `tp` while in_proj's weight gradient is computed.
template <class T>
void mixer_backward(const MixerConfig& config, const MixerWeights<T>& w, const MixerGrads<T>& grads,
                    const MixerState& saved, const T* dout, T* dh, const plexus::sdk::Group& tp);

// Matrix-product FLOPs (2 per multiply-add) of one forward and one backward as run.
struct MixerFlops {
  double forward = 0, backward = 0;
};
MixerFlops mixer_flops(const MixerConfig& config, int64_t batch, int64_t seq);

// The elements a training forward of [batch, seq] keeps in a MixerState (the list above).
int64_t mixer_saved_elements(const MixerConfig& config, int64_t batch, int64_t seq);

}  // namespace plexus::mamba

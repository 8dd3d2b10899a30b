// The seam between mamba.mixer and its implementation on a GPU.
//
// The layer (mixer_layer.cpp) reads its configuration, declares its parameters and makes every
// check of every call, on the CPU and on a GPU alike (devices, dtypes, shapes, the saved
// forward), then hands the checked float32 pointers to the implementation of its device: the CPU
// path (mixer_forward.cpp, mixer_backward.cpp) or, when the layer was created on a CUDA device, a
// MixerDevice built then (src/cuda/), which also creates the per-microbatch states.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "config.hpp"
#include "mixer.hpp"
#include "plexus/host.h"

namespace plexus::mamba {

class MixerDevice {
 public:
  virtual ~MixerDevice() = default;

  virtual std::unique_ptr<MixerStateBase> create_state() = 0;

  // h, out: [batch, seq, d_model] on the device. training: keep in `state` what backward needs
  // (and record it); otherwise keep nothing. The work runs on `stream` (NULL: the default one).
  virtual void forward(MixerStateBase& state, const MixerWeights<float>& w, int64_t batch, int64_t seq,
                       const float* h, float* out, bool training, plx_stream stream) = 0;
  // After a training forward of `state` (checked by the layer): dh written (may be null), the
  // gradients accumulated (each may be null).
  virtual void backward(MixerStateBase& state, const MixerWeights<float>& w, const MixerGrads<float>& grads,
                        const float* dout, float* dh, plx_stream stream) = 0;

  // Copies `bytes` of host memory into device memory of this layer's device (a parameter that
  // init_param drew on the host).
  virtual void upload(const void* host, std::size_t bytes, void* device) = 0;
};

// Whether this plugin was built with the CUDA path (src/cuda/; src/cuda_absent.cpp without it).
bool cuda_built() noexcept;

// The CUDA implementation for a layer of this configuration on `device`; throws
// Error(PLX_ERR_UNSUPPORTED) naming the device when this process cannot use it.
std::unique_ptr<MixerDevice> make_cuda_mixer(const MixerConfig& config, DLDevice device);

}  // namespace plexus::mamba

// The seam between moe.layer and its implementation on a GPU.
//
// The layer (moe_layer.cpp) reads its configuration, declares its parameters, keeps the stage
// order and makes every check of every call on the CPU and on a GPU alike (devices, dtypes,
// shapes, the saved forward), then hands the checked float32 device pointers of one stage to the
// MoeDevice built when the layer was created on a CUDA device (src/cuda/). What a microbatch keeps
// on the device lives in a DeviceState, held by the layer's per-microbatch state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "config.hpp"
#include "plexus/host.h"

namespace plexus::moe {

// The layer's parameters on the device, float32 (nullptr: absent).
struct DeviceWeights {
  const float* norm_w = nullptr;
  const float* norm_b = nullptr;       // LayerNorm only
  const float* router = nullptr;       // [E, C]
  const float* bias = nullptr;         // the expert bias [E], or none
  std::vector<const float*> fc1, fc2;  // per expert
  const float* shared_fc1 = nullptr;
  const float* shared_fc2 = nullptr;
};

// Their gradients, accumulated into (nullptr: not wanted).
struct DeviceGrads {
  float* norm_w = nullptr;
  float* norm_b = nullptr;
  float* router = nullptr;
  std::vector<float*> fc1, fc2;
  float* shared_fc1 = nullptr;
  float* shared_fc2 = nullptr;
};

// What the route stage tells the layer: the rows of each expert (offsets [E + 1], as
// Permutation::offsets), the pairs a capacity dropped and, in a training forward, the auxiliary
// losses' values.
struct RouteResult {
  std::vector<int64_t> offsets;
  int64_t dropped = 0;
  double aux_loss = 0, z_loss = 0;
};

class DeviceState {
 public:
  virtual ~DeviceState() = default;
};

class MoeDevice {
 public:
  virtual ~MoeDevice() = default;

  virtual std::unique_ptr<DeviceState> create_state() = 0;

  // Forward stages, in order. h: [tokens, C]; out: [tokens, C]. Each on `stream` (NULL: the
  // device's default stream).
  virtual RouteResult route(DeviceState& state, const DeviceWeights& w, int64_t tokens, const float* h,
                            bool training, plx_stream stream) = 0;
  virtual void experts(DeviceState& state, const DeviceWeights& w, plx_stream stream) = 0;
  virtual void unpermute(DeviceState& state, float* out, plx_stream stream) = 0;

  // Backward stages, in reverse order, after a training forward of `state`. dout: [tokens, C];
  // dh written (may be null); the gradients accumulated.
  virtual void unpermute_backward(DeviceState& state, const float* dout, plx_stream stream) = 0;
  virtual void experts_backward(DeviceState& state, const DeviceWeights& w, const DeviceGrads& g,
                                const float* dout, plx_stream stream) = 0;
  virtual void route_backward(DeviceState& state, const DeviceWeights& w, const DeviceGrads& g,
                              double loss_scale, float* dh, plx_stream stream) = 0;

  // values summed over `group` in place, through a buffer on this layer's device: a GPU's comm
  // backend (NCCL) reduces device memory only. Blocking; collective over the group.
  virtual void all_reduce_sum(const plx_host_api& host, plx_group group, std::vector<double>& values) = 0;

  // Copies between host memory and this layer's device (the expert bias's update after a step).
  virtual void download(const void* device, std::size_t bytes, void* host) = 0;
  virtual void upload(const void* host, std::size_t bytes, void* device) = 0;
};

// Whether this plugin was built with the CUDA path (src/cuda/; src/cuda_absent.cpp without it).
bool cuda_built() noexcept;

// The CUDA implementation for a layer of this configuration on `device`; throws
// Error(PLX_ERR_UNSUPPORTED) naming the device when this process cannot use it.
std::unique_ptr<MoeDevice> make_cuda_moe(const MoeConfig& config, DLDevice device);

}  // namespace plexus::moe

// Parameters are owned by the host (see docs/architecture.md): layers declare them, the store
// allocates, initializes, names and shares them. Two declarations with the same full name are
// one parameter (how the LM head ties its weight to the embedding), provided shape and dtype
// agree; both layers' gradients accumulate into the one gradient buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/core/engine/tensor.hpp"
#include "plexus/layer.h"

namespace plexus {

struct Parameter {
  std::string name;  // full checkpoint name, e.g. "decoder.layers.0.mlp.linear_fc1.weight"
  // Its full name in Megatron's Transformer Engine spelling, when its layer declares one
  // (plx_param_spec.te_name); empty: the same as name.
  std::string te_name;
  uint32_t flags = 0;
  uint32_t init = 0;
  double init_a = 0;
  double init_b = 0;
  std::string declared_by;  // the unit that declared it first (for messages)
  std::string grad_group;   // the group its gradient is averaged over (plx_param_spec.grad_group; "dp")
  std::vector<int64_t> shape;  // as declared; value and grad have it whenever they are not empty
  // Under a data-parallel strategy value and grad are views into the strategy's buffers while
  // their unit is acquired, and empty otherwise (engine/sharded_parameters.hpp).
  Tensor value;
  Tensor grad;  // empty for a buffer
  int64_t numel() const noexcept {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  bool decays() const noexcept { return (flags & PLX_PARAM_NO_WEIGHT_DECAY) == 0; }
  // State the layer updates itself (PLX_PARAM_BUFFER): no gradient, no reduction, no optimizer;
  // checkpointed like a parameter.
  bool is_buffer() const noexcept { return (flags & PLX_PARAM_BUFFER) != 0; }
};

class ParameterStore {
 public:
  // Registers a declaration; returns the index of the (possibly shared) parameter.
  std::size_t declare(const plx_param_spec& spec, const std::string& prefix, const std::string& unit);
  // Where parameters declared from now on live (the CPU until set).
  void set_device(DLDevice device) noexcept { device_ = device; }
  // Parameters declared from now on get no storage of their own (buffers excepted): a
  // data-parallel strategy will hold them (engine/sharded_parameters.hpp), so a rank never
  // allocates the whole model.
  void set_deferred(bool deferred) noexcept { deferred_ = deferred; }
  std::size_t size() const noexcept { return params_.size(); }
  Parameter& operator[](std::size_t i) { return *params_[i]; }
  const Parameter& operator[](std::size_t i) const { return *params_[i]; }
  const Parameter* find(const std::string& name) const;
  void zero_grads();
  int64_t count_elements() const;

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
  DLDevice device_{kDLCPU, 0};
  bool deferred_ = false;
};

// Fills a parameter from its init spec with the counter-based RNG keyed by (seed, name), so a
// parameter's initial values do not depend on device, thread count or declaration order.
void initialize_parameter(Parameter& param, uint64_t seed);

}  // namespace plexus

// RAII proxies over registered components: they create the plugin's object, forward calls and
// turn a non-OK status into ComponentCallError carrying the plugin's message, prefixed with the
// plugin file and component names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/data_parallel.h"
#include "plexus/layer.h"
#include "plexus/scheduler.h"

namespace plexus {

// Throws ComponentCallError for a non-OK status: "<component> (<kind>, plugin '<name>' from
// <file>): <operation> failed: <status name>: <plugin's message>".
void check_call(const Component& component, const char* operation, plx_status status);

class LayerInstance {
 public:
  LayerInstance(const Component& component, const plx_layer_create_args& args);
  ~LayerInstance();
  LayerInstance(const LayerInstance&) = delete;
  LayerInstance& operator=(const LayerInstance&) = delete;

  plx_layer_info info() const;
  plx_param_spec param(uint32_t index) const;
  plx_stage_info stage(uint32_t index) const;
  std::vector<plx_tensor_desc> output_desc(const std::vector<plx_tensor_desc>& inputs) const;
  // Fills a PLX_INIT_CUSTOM parameter; an error when the layer has no initializer.
  void init_param(uint32_t index, DLTensor& value, uint64_t seed) const;

  struct Flops {
    double forward = 0;
    double backward = 0;
  };
  // Empty when the layer cannot tell (its plugin predates ABI 1.1, or it says unsupported).
  std::optional<Flops> estimate_flops(const std::vector<plx_tensor_desc>& inputs) const;
  // ABI 1.10: the bytes a training forward of these inputs keeps for the backward, on a rank of
  // a context-parallel group of cp_size ranks. Empty when the layer cannot tell (its plugin
  // predates 1.10, or it says unsupported).
  std::optional<double> estimate_activation_bytes(const std::vector<plx_tensor_desc>& inputs,
                                                  uint32_t cp_size) const;
  // ABI 1.5: after an optimizer step, with the layer's parameter views (nothing when the layer
  // has no after_step).
  void after_step(int64_t step, std::vector<DLTensor>& params) const;
  bool has_after_step() const noexcept { return table_->after_step != nullptr; }

  // Per-microbatch state, destroyed through the plugin.
  class State {
   public:
    State(const LayerInstance& owner, void* state) : owner_(&owner), state_(state) {}
    ~State();
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    void* get() const noexcept { return state_; }

   private:
    const LayerInstance* owner_;
    void* state_;
  };
  std::unique_ptr<State> create_state(uint32_t microbatch) const;
  void forward(State& state, uint32_t stage, const plx_forward_args& args) const;
  void backward(State& state, uint32_t stage, const plx_backward_args& args) const;
  // Whether the layer computes weight gradients apart from backward (it may then be called with
  // PLX_BACKWARD_SKIP_WEIGHT_GRADS, and backward_weights afterwards).
  bool has_backward_weights() const noexcept { return table_->backward_weights != nullptr; }
  void backward_weights(State& state, const plx_backward_args& args) const;
  const Component& component() const noexcept { return *component_; }

 private:
  const Component* component_;
  const plx_layer_v1* table_;
  void* layer_ = nullptr;
};

class SchedulerInstance {
 public:
  SchedulerInstance(const Component& component, plx_config config);
  ~SchedulerInstance();
  SchedulerInstance(const SchedulerInstance&) = delete;
  SchedulerInstance& operator=(const SchedulerInstance&) = delete;
  void run_step(const plx_schedule_env& env) const;

 private:
  const Component* component_;
  const plx_scheduler_v1* table_;
  void* scheduler_ = nullptr;
};

// A data-parallel strategy (plexus/data_parallel.h): where parameters, gradients and optimizer
// state live across the data-parallel ranks, and their communication.
class DataParallelInstance {
 public:
  DataParallelInstance(const Component& component, plx_config config, const plx_dp_setup& setup);
  ~DataParallelInstance();
  DataParallelInstance(const DataParallelInstance&) = delete;
  DataParallelInstance& operator=(const DataParallelInstance&) = delete;

  plx_dp_layout layout(uint32_t unit) const;
  DLTensor acquire(uint32_t unit, uint32_t purpose) const;
  void release(uint32_t unit, uint32_t purpose) const;
  void prefetch(uint32_t unit, uint32_t purpose) const;
  void begin_step() const;
  DLTensor grads(uint32_t unit) const;
  void grads_ready(uint32_t unit, bool last) const;
  void finish_grads() const;
  struct Shard {
    DLTensor values{};
    DLTensor grads{};
  };
  Shard shard(uint32_t unit) const;
  void after_update() const;
  void gather(uint32_t unit, const DLTensor& shard, DLTensor& full) const;
  plx_dp_memory memory() const;
  const Component& component() const noexcept { return *component_; }

 private:
  const Component* component_;
  const plx_data_parallel_v1* table_;
  void* strategy_ = nullptr;
};

}  // namespace plexus

// The model's parameters handed to a data-parallel strategy (plexus/data_parallel.h).
//
// The model is cut into FSDP units: the embedding, every `layers_per_unit` logical decoder layers
// (a GPT layer's attention and MLP, a HybridStack group), and the output layers (final norm and
// head). A unit's parameters are laid out as flat buffers, one per gradient group ("dp", and
// "expert_dp" for an MoE layer's experts): the strategy's units. The strategy owns the buffers;
// the store's Parameter::value and ::grad become views into them while they are acquired and are
// empty otherwise, so a parameter used outside its unit's window fails loudly instead of reading
// stale memory.
//
// A parameter belongs to the first unit (in forward order) that uses it; a later unit that uses
// it too (the head's tied embedding weight) acquires the owner's buffer as well, and writes its
// gradient there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/parameters.hpp"

namespace plexus {

class ShardedParameters {
 public:
  // One FSDP unit as the model describes it: its name, and every parameter its layers use
  // (including those owned by an earlier unit), in the order the layers declare them.
  struct UnitSpec {
    std::string name;
    std::vector<std::size_t> params;
  };
  // Creates the strategy and moves the store's values into its buffers (the store's own tensors
  // are freed). Gradient groups other than "dp" must exist in the runtime.
  ShardedParameters(ParameterStore& params, const std::vector<UnitSpec>& units, const Component& strategy,
                    plx_config options, const distributed::Runtime& runtime, DLDevice device);
  ~ShardedParameters();

  std::size_t num_units() const noexcept { return fsdp_.size(); }
  ParameterStore& store() noexcept { return params_; }
  DLDevice device() const noexcept { return device_; }
  const std::string& unit_name(std::size_t unit) const { return fsdp_.at(unit).name; }

  // Around an FSDP unit's forward and backward. begin_backward also hands out the gradient
  // buffers; end_backward reports them complete (`microbatches`: this step's count).
  void begin_forward(std::size_t unit);
  void end_forward(std::size_t unit);
  void begin_backward(std::size_t unit);
  void end_backward(std::size_t unit);
  void prefetch_forward(std::size_t unit);
  void prefetch_backward(std::size_t unit);
  // Whole values of a unit for reading (a checkpoint; collective) or writing (initialization,
  // loading); the store's values are views meanwhile.
  void begin_read(std::size_t unit);
  void end_read(std::size_t unit);
  void begin_write(std::size_t unit);
  void end_write(std::size_t unit);
  // The FSDP unit owning parameter p, its buffer, and its first element there (not for a
  // PLX_PARAM_BUFFER parameter, which stays whole in the store).
  std::size_t unit_of(std::size_t param) const { return owner_fsdp_.at(param); }
  std::size_t buffer_of(std::size_t param) const { return buffer_of_.at(param); }
  int64_t offset_of(std::size_t param) const { return offset_of_.at(param); }

  void begin_step(int64_t microbatches);
  void finish_grads();
  void after_update();

  // The strategy's units (flat buffers): what the optimizer and checkpoints work on.
  struct Segment {  // one parameter's part of a shard
    std::size_t param = 0;
    int64_t shard_begin = 0;  // element offset into the shard
    int64_t param_begin = 0;  // element offset into the parameter
    int64_t count = 0;
  };
  struct Buffer {
    std::string name;   // "decoder.layers.3", "decoder.layers.3 (expert_dp)"
    std::string group;  // "dp", "expert_dp"
    std::size_t fsdp = 0;
    std::vector<std::size_t> params;
    std::vector<int64_t> offsets;  // each parameter's first element in the flat buffer
    int64_t numel = 0;
    double grad_scale = 1.0;
    bool replicated = false;
    bool tensor_split = false;     // its parameters are tensor-parallel shards (Parameter::tp)
    std::string split_group;       // the group they are split over (TensorSplit::group)
    bool partial_over_tp = false;  // their gradients are parts summed over tp (Parameter::partial_over_tp)
    plx_dp_layout layout{};
    std::vector<Segment> segments;  // the parameters' parts inside this rank's shard
    // Completed contributions this step, and how many make the step's last one.
    int64_t done = 0, expected = 0;
    int acquired = 0;  // the engine's count of whole-value acquisitions (views set while > 0)
  };
  const std::vector<Buffer>& buffers() const noexcept { return buffers_; }
  DataParallelInstance& strategy() noexcept { return *strategy_; }
  // Bytes of values and gradients the strategy holds now and at most.
  plx_dp_memory memory() const { return strategy_->memory(); }
  // True when whole values exist only while acquired: every rank must then make the same
  // acquisitions (evaluation, sampling) in the same order.
  bool values_sharded() const noexcept { return values_sharded_; }
  const std::string& strategy_name() const noexcept { return strategy_name_; }

 private:
  struct Fsdp {
    std::string name;
    std::vector<uint32_t> buffers;  // every buffer it uses: its own and borrowed ones
  };
  void acquire(uint32_t buffer, uint32_t purpose);
  void release(uint32_t buffer, uint32_t purpose);
  void point_values(Buffer& b, const DLTensor& whole);
  void point_grads(Buffer& b, const DLTensor& whole);

  ParameterStore& params_;
  std::vector<std::vector<int64_t>> shapes_;  // per parameter
  std::vector<DLDataType> dtypes_;
  std::vector<Fsdp> fsdp_;
  std::vector<Buffer> buffers_;
  std::vector<std::size_t> owner_fsdp_;
  std::vector<std::size_t> buffer_of_;  // per parameter
  std::vector<int64_t> offset_of_;      // per parameter
  std::unique_ptr<DataParallelInstance> strategy_;
  DLDevice device_;
  bool values_sharded_ = false;
  std::string strategy_name_;
};

}  // namespace plexus

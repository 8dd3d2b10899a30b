// Parameters are owned by the host (see docs/architecture.md): layers declare them, the store
// allocates, initializes, names and shares them. Two declarations with the same full name are
// one parameter (how the LM head ties its weight to the embedding), provided shape and dtype
// agree; both layers' gradients accumulate into the one gradient buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plexus/core/engine/tensor.hpp"
#include "plexus/layer.h"

namespace plexus {

// How a parameter is cut over the tensor-parallel group (plx_param_spec's tp fields, ABI 1.8):
// along `dim` the whole tensor is the consecutive `parts` (whole sizes), and rank r holds, part
// after part, slice r of each part's `size` equal slices.
struct TensorSplit {
  int32_t dim = -1;            // -1: whole, the same on every tp rank
  std::vector<int64_t> parts;  // whole sizes along dim, summing to the whole dimension
  int32_t rank = 0, size = 1;  // this rank in the group it is split over
  // That group (plx_param_spec.tp_group, ABI 1.10): "tp", or "expert_tp" for an MoE layer's experts.
  std::string group = "tp";
  bool split() const noexcept { return dim >= 0 && size > 1; }
  // Declared as a tensor-parallel shard (split over tp when tp > 1).
  bool tensor_parallel() const noexcept { return dim >= 0; }
};

// How a layer's spec says its parameter is cut (ABI 1.8), on rank `rank` of the group it names
// (plx_param_spec.tp_group: "tp" or "expert_tp") of `size` ranks; whole (dim -1) without
// PLX_PARAM_TENSOR_PARALLEL. Throws naming `what` for a split the shard's shape and the group's
// size cannot make, or a group that is neither.
TensorSplit tensor_split_of(const plx_param_spec& spec, int32_t rank, int32_t size, const std::string& what);
// The whole tensor's shape from a shard's.
std::vector<int64_t> whole_shape(const std::vector<int64_t>& shard_shape, const TensorSplit& split);
// Rank `rank`'s shard of `whole` into `shard` (host float32 tensors of the whole and shard shapes).
void copy_shard(const Tensor& whole, const TensorSplit& split, int32_t rank, Tensor& shard);
// The inverse: rank `rank`'s `shard` into its places in `whole`.
void place_shard(const Tensor& shard, const TensorSplit& split, int32_t rank, Tensor& whole);

struct Parameter {
  std::string name;  // full checkpoint name, e.g. "decoder.layers.0.mlp.linear_fc1.weight"
  // Its full name in Megatron's Transformer Engine spelling, when its layer declares one
  // (plx_param_spec.te_name); empty: the same as name.
  std::string te_name;
  uint32_t flags = 0;
  uint32_t init = 0;
  double init_a = 0;
  double init_b = 0;
  std::string declared_by;     // the unit that declared it first (for messages)
  std::string grad_group;      // the group its gradient is averaged over (plx_param_spec.grad_group; "dp")
  std::vector<int64_t> shape;  // as declared; value and grad have it whenever they are not empty
  // Tensor parallelism: shape is this rank's shard of a tensor of whole_shape cut as tp says
  // (whole_shape == shape for a parameter every tp rank holds whole). Initialization and
  // checkpoints work on the whole tensor.
  TensorSplit tp;
  std::vector<int64_t> whole_shape;
  // Under a data-parallel strategy value and grad are views into the strategy's buffers while
  // their unit is acquired, and empty otherwise (engine/sharded_parameters.hpp).
  Tensor value;
  Tensor grad;  // empty for a buffer
  int64_t numel() const noexcept {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // The whole tensor's elements (numel() on every rank without tensor parallelism).
  int64_t whole_numel() const noexcept {
    int64_t n = 1;
    for (int64_t d : whole_shape) n *= d;
    return n;
  }
  bool decays() const noexcept { return (flags & PLX_PARAM_NO_WEIGHT_DECAY) == 0; }
  // State the layer updates itself (PLX_PARAM_BUFFER): no gradient, no reduction, no optimizer;
  // checkpointed like a parameter.
  bool is_buffer() const noexcept { return (flags & PLX_PARAM_BUFFER) != 0; }
  // Whole on every tp rank with a gradient of this rank's tokens only (PLX_PARAM_SEQUENCE_PARALLEL):
  // summed over tp once the data-parallel reduction is done.
  bool partial_over_tp() const noexcept { return (flags & PLX_PARAM_SEQUENCE_PARALLEL) != 0; }
  // Its gradient is reduced over a group of its own, not dp: an MoE layer's expert, which each rank
  // of an ep group holds a different one of (its replicas are the expert_dp group's).
  bool divided_over_ep() const noexcept { return grad_group != "dp"; }
  // Its rows are the padded vocabulary (PLX_PARAM_VOCABULARY): a checkpoint padded otherwise loads.
  bool vocabulary_rows() const noexcept { return (flags & PLX_PARAM_VOCABULARY) != 0; }
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
  // This rank's place in the tensor-parallel group ("tp"), for parameters declared from now on.
  void set_tensor_parallel(int32_t rank, int32_t size) noexcept {
    tp_rank_ = rank;
    tp_size_ = size;
  }
  int32_t tensor_parallel_size() const noexcept { return tp_size_; }
  // This rank's place in the expert grid's tensor-parallel group ("expert_tp"), for the experts
  // declared from now on; unset, the tp group's.
  void set_expert_tensor_parallel(int32_t rank, int32_t size) noexcept { expert_tp_ = {rank, size}; }
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
  int32_t tp_rank_ = 0, tp_size_ = 1;
  std::optional<std::pair<int32_t, int32_t>> expert_tp_;  // rank, size
  // A spec's split, on this rank of the group it names.
  TensorSplit split_of(const plx_param_spec& spec, const std::string& what) const;
};

// Fills a parameter from its init spec with the counter-based RNG keyed by (seed, name), so a
// parameter's initial values do not depend on device, thread count or declaration order. A
// tensor-parallel shard gets its slice of the whole tensor's values: the same at every tp size.
void initialize_parameter(Parameter& param, uint64_t seed);

}  // namespace plexus

// AdamW on the shards of a data-parallel strategy: each rank updates only the elements of each
// unit that its layout gives it (plx_dp_layout), with moments of that size, and the global
// gradient norm for clipping adds every rank's part exactly once.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/sharded_parameters.hpp"
#include "plexus/core/engine/optimizer.hpp"

namespace plexus {

class ShardedAdamW {
 public:
  // `sum_over_dp` adds a value over the data-parallel ranks; `sum_over_ep` over the expert-parallel
  // ranks (identity without expert parallelism). A unit's part of the squared norm is added over dp
  // when its shard is a partition of its group (PLX_DP_OPTIM_SHARDED); a whole unit replicated on
  // every data-parallel rank counts once; whole experts replicated over "expert_dp" count once per
  // ep rank, which holds other experts.
  ShardedAdamW(ShardedParameters& sharded, ParameterStore& params, OptimizerSettings settings,
               std::function<double(double)> sum_over_dp, std::function<double(double)> sum_over_ep);
  // Pipeline parallelism: the global norm adds every stage's part, and a buffer whose parameters
  // another stage counts (the tied embedding's copy, alone in its buffer) is left out (`counted`:
  // by parameter; empty: all).
  void set_stage_sum(std::function<double(double)> sum_over_stages, const std::vector<bool>& counted);
  // Tensor parallelism: the buffers of tp shards add their part over the tp group as well.
  void set_tensor_parallel_sum(std::function<double(double)> sum_over_tp) {
    sum_over_tp_ = std::move(sum_over_tp);
  }
  // And the buffers of experts split over the expert grid's tp group, when it is not tp's.
  void set_expert_tensor_parallel_sum(std::function<double(double)> sum_over_expert_tp) {
    sum_over_expert_tp_ = std::move(sum_over_expert_tp);
  }
  // Clips and updates every shard; returns the norm before clipping. `step` is 0-based.
  double step(int64_t step);
  // step() in its two halves (AdamW::squared_norm, AdamW::update).
  double squared_norm() const;
  void update(int64_t step, double norm);
  double last_lr() const noexcept { return last_lr_; }
  // The moments of buffer k ([shard_numel] each), for checkpoints.
  Tensor& exp_avg(std::size_t k) { return exp_avg_.at(k); }
  Tensor& exp_avg_sq(std::size_t k) { return exp_avg_sq_.at(k); }
  uint64_t state_bytes() const;

 private:
  ShardedParameters* sharded_;
  ParameterStore* params_;
  OptimizerSettings settings_;
  std::function<double(double)> sum_over_dp_, sum_over_ep_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  std::function<double(double)> sum_over_stages_;
  std::function<double(double)> sum_over_tp_, sum_over_expert_tp_;
  std::vector<bool> buffer_counted_;  // by buffer; empty: all
  double last_lr_ = 0;
};

}  // namespace plexus

// AdamW (decoupled weight decay, bias-corrected moments), global-norm gradient clipping, and
// the learning-rate schedule: linear warmup, then cosine or linear decay to min_lr.
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plexus/core/engine/parameters.hpp"
#include "plexus/core/engine/tensor.hpp"

namespace plexus {

struct OptimizerSettings {
  double lr = 1e-3;
  double min_lr = 1e-4;
  std::string decay_style = "cosine";
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double clip_grad = 1.0;
  static OptimizerSettings from_run_config(const boost::json::value& run_config);
};

// The learning rate of step `step` (0-based): warmup from lr/warmup to lr over warmup_steps,
// then decay from lr to min_lr over the remaining steps.
double learning_rate(const OptimizerSettings& s, int64_t step);

class AdamW {
 public:
  AdamW(ParameterStore& params, OptimizerSettings settings);
  // Clips, then updates every parameter from its gradient. Returns the gradient norm before
  // clipping. `step` is 0-based; the bias correction uses step + 1.
  double step(int64_t step);
  // step() in its two halves, for a norm over more than this store (MIMO: every module's
  // gradients clip by one global norm): the squared gradient norm over this store (with the sums
  // over tp, ep and stages set below), then the update clipping by `norm`.
  double squared_norm() const;
  void update(int64_t step, double norm);
  double last_lr() const noexcept { return last_lr_; }
  // Under expert parallelism each rank holds only its experts (the parameters whose grad_group
  // is not "dp"): the global norm adds their squared norm summed over the ranks that hold the
  // other experts, which this function returns for this rank's part. Unset: every parameter is
  // on every rank.
  void set_divided_sum(std::function<double(double)> sum_over_holders) {
    divided_sum_ = std::move(sum_over_holders);
  }
  // Tensor parallelism: a split parameter (Parameter::tp) is a shard, so the global norm adds the
  // shards' squares over the tp group, which this function returns for this rank's part; the
  // parameters every tp rank holds whole count once. Unset: nothing is split.
  void set_tensor_parallel_sum(std::function<double(double)> sum_over_tp) {
    tp_sum_ = std::move(sum_over_tp);
  }
  // The same for the experts split over the expert grid's tp group (TensorSplit::group
  // "expert_tp") when it is not tp's. Unset: they are summed over tp.
  void set_expert_tensor_parallel_sum(std::function<double(double)> sum_over_expert_tp) {
    etp_sum_ = std::move(sum_over_expert_tp);
  }
  // Pipeline parallelism: each stage holds part of the model, so the global norm adds every
  // stage's parameters. `ordered_sum` takes this stage's squared norm of each parameter (by
  // parameter; 0 for those not counted) and returns the sum over every stage in the whole model's
  // order, the order one stage would add them in, so the norm is the same to the bit whatever
  // pp is; `sum_over_stages` adds the experts' part, already a sum over ep. A parameter two stages
  // hold (the tied embedding's copy) counts on one of them only (`counted`; empty: all).
  void set_stage_sum(std::function<double(const std::vector<double>&)> ordered_sum,
                     std::function<double(double)> sum_over_stages, std::vector<bool> counted) {
    ordered_sum_ = std::move(ordered_sum);
    stage_sum_ = std::move(sum_over_stages);
    counted_ = std::move(counted);
  }
  // Optimizer state for checkpoints: "<param>.exp_avg" / "<param>.exp_avg_sq", two per
  // parameter in parameter order, none for a buffer (PLX_PARAM_BUFFER), which it never updates.
  std::vector<std::pair<std::string, Tensor*>> state_tensors();
  // Parameter p's moment `which` (0: exp_avg, 1: exp_avg_sq); empty for a buffer.
  Tensor& moment(std::size_t p, int which) { return which == 0 ? exp_avg_.at(p) : exp_avg_sq_.at(p); }

 private:
  ParameterStore* params_;
  OptimizerSettings settings_;
  std::vector<Tensor> exp_avg_;
  std::vector<Tensor> exp_avg_sq_;
  double last_lr_ = 0;
  std::function<double(double)> divided_sum_;
  std::function<double(const std::vector<double>&)> ordered_sum_;
  std::function<double(double)> stage_sum_;
  std::function<double(double)> tp_sum_, etp_sum_;
  std::vector<bool> counted_;
};

}  // namespace plexus

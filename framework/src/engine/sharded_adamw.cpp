#include "engine/sharded_adamw.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/adamw_step.hpp"
#include "engine/device_ops.hpp"

namespace plexus {
namespace {

// A float32 view of `count` elements of a strategy's tensor from element `begin`.
Tensor elements(const DLTensor& t, int64_t begin, int64_t count) {
  auto* data =
      static_cast<std::byte*>(t.data) + t.byte_offset + static_cast<std::size_t>(begin) * sizeof(float);
  return Tensor::borrowed(data, {count}, plx_dtype_f32(), t.device);
}

Tensor elements(const Tensor& t, int64_t begin, int64_t count) {
  return elements(t.view(), begin, count);
}

}  // namespace

ShardedAdamW::ShardedAdamW(ShardedParameters& sharded, ParameterStore& params, OptimizerSettings settings,
                           std::function<double(double)> sum_over_dp,
                           std::function<double(double)> sum_over_ep)
    : sharded_(&sharded),
      params_(&params),
      settings_(std::move(settings)),
      sum_over_dp_(std::move(sum_over_dp)),
      sum_over_ep_(std::move(sum_over_ep)) {
  for (const ShardedParameters::Buffer& b : sharded.buffers()) {
    exp_avg_.emplace_back(std::vector<int64_t>{b.layout.shard_numel}, plx_dtype_f32(), sharded.device());
    exp_avg_sq_.emplace_back(std::vector<int64_t>{b.layout.shard_numel}, plx_dtype_f32(), sharded.device());
  }
}

uint64_t ShardedAdamW::state_bytes() const {
  uint64_t bytes = 0;
  for (std::size_t k = 0; k < exp_avg_.size(); ++k) bytes += exp_avg_[k].bytes() + exp_avg_sq_[k].bytes();
  return bytes;
}

void ShardedAdamW::set_stage_sum(std::function<double(double)> sum_over_stages,
                                 const std::vector<bool>& counted) {
  sum_over_stages_ = std::move(sum_over_stages);
  buffer_counted_.assign(sharded_->buffers().size(), true);
  if (counted.empty()) return;
  for (std::size_t k = 0; k < buffer_counted_.size(); ++k) {
    const ShardedParameters::Buffer& b = sharded_->buffers()[k];
    const auto uncounted =
        std::count_if(b.params.begin(), b.params.end(), [&](std::size_t p) { return !counted[p]; });
    if (uncounted > 0 && uncounted < static_cast<std::ptrdiff_t>(b.params.size()))
      throw std::runtime_error(
          "buffer " + b.name +
          " mixes parameters that another pipeline stage counts in the "
          "gradient norm with its own: a parameter two stages hold must be alone in its buffer");
    buffer_counted_[k] = uncounted == 0;
  }
}

double ShardedAdamW::step(int64_t step) {
  const double norm = std::sqrt(squared_norm());
  update(step, norm);
  return norm;
}

double ShardedAdamW::squared_norm() const {
  const auto& buffers = sharded_->buffers();
  std::vector<DataParallelInstance::Shard> shards;
  // [0]: whole on every tp rank, [1]: tp shards (summed over tp too), [2]: shards over the expert
  // grid's tp group (summed over it).
  double partitioned[3] = {0, 0, 0}, replicated[3] = {0, 0, 0}, experts[3] = {0, 0, 0};
  for (std::size_t k = 0; k < buffers.size(); ++k) {
    const ShardedParameters::Buffer& b = buffers[k];
    shards.push_back(sharded_->strategy().shard(static_cast<uint32_t>(k)));
    if (b.layout.shard_numel == 0 || (!buffer_counted_.empty() && !buffer_counted_[k])) continue;
    const Tensor grads = elements(shards.back().grads, 0, b.layout.shard_numel);
    const double sum = device_ops::sum_of_squares({&grads});
    const int tp = !b.tensor_split                                       ? 0
                   : b.split_group == "expert_tp" && sum_over_expert_tp_ ? 2
                   : sum_over_tp_                                        ? 1
                                                                         : 0;
    if ((b.layout.flags & PLX_DP_OPTIM_SHARDED) != 0)
      partitioned[tp] += sum;
    else if (b.group == "dp")
      replicated[tp] += sum;
    else
      experts[tp] += sum;
  }
  // Experts divided over ep and (expert tensor parallelism) split over tp: summed over both.
  double sum_sq = replicated[0] + sum_over_ep_(experts[0]) + sum_over_dp_(partitioned[0]);
  if (sum_over_tp_)
    sum_sq += sum_over_tp_(replicated[1] + sum_over_dp_(partitioned[1]) + sum_over_ep_(experts[1]));
  if (sum_over_expert_tp_)
    sum_sq += sum_over_expert_tp_(replicated[2] + sum_over_dp_(partitioned[2]) + sum_over_ep_(experts[2]));
  if (sum_over_stages_) sum_sq = sum_over_stages_(sum_sq);
  return sum_sq;
}

void ShardedAdamW::update(int64_t step, double norm) {
  const auto& buffers = sharded_->buffers();
  std::vector<DataParallelInstance::Shard> shards;
  for (std::size_t k = 0; k < buffers.size(); ++k)
    shards.push_back(sharded_->strategy().shard(static_cast<uint32_t>(k)));
  const double lr = learning_rate(settings_, step);
  last_lr_ = lr;
  vector_ops::AdamWStep update = adamw_step_constants(settings_, step, norm);
  for (std::size_t k = 0; k < buffers.size(); ++k) {
    for (const ShardedParameters::Segment& s : buffers[k].segments) {
      const Parameter& p = (*params_)[s.param];
      update.decay = static_cast<float>(p.decays() ? lr * settings_.weight_decay : 0.0);
      Tensor value = elements(shards[k].values, s.shard_begin, s.count);
      const Tensor grad = elements(shards[k].grads, s.shard_begin, s.count);
      Tensor m = elements(exp_avg_[k], s.shard_begin, s.count);
      Tensor v = elements(exp_avg_sq_[k], s.shard_begin, s.count);
      device_ops::adamw_update(update, value, grad, m, v);
    }
  }
  sharded_->after_update();
}

}  // namespace plexus

#include "engine/sharded_adamw.hpp"

#include <cmath>

#include "engine/adamw_step.hpp"
#include "engine/device_ops.hpp"

namespace plexus {
namespace {

// A float32 view of `count` elements of a strategy's tensor from element `begin`.
Tensor elements(const DLTensor& t, int64_t begin, int64_t count) {
  auto* data = static_cast<std::byte*>(t.data) + t.byte_offset + static_cast<std::size_t>(begin) * sizeof(float);
  return Tensor::borrowed(data, {count}, plx_dtype_f32(), t.device);
}

Tensor elements(const Tensor& t, int64_t begin, int64_t count) {
  return elements(t.view(), begin, count);
}

}  // namespace

ShardedAdamW::ShardedAdamW(ShardedParameters& sharded, ParameterStore& params, OptimizerSettings settings,
                           std::function<double(double)> sum_over_dp, std::function<double(double)> sum_over_ep)
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

double ShardedAdamW::step(int64_t step) {
  const auto& buffers = sharded_->buffers();
  std::vector<DataParallelInstance::Shard> shards;
  double partitioned = 0, replicated = 0, experts = 0;
  for (std::size_t k = 0; k < buffers.size(); ++k) {
    const ShardedParameters::Buffer& b = buffers[k];
    shards.push_back(sharded_->strategy().shard(static_cast<uint32_t>(k)));
    if (b.layout.shard_numel == 0) continue;
    const Tensor grads = elements(shards.back().grads, 0, b.layout.shard_numel);
    const double sum = device_ops::sum_of_squares({&grads});
    if ((b.layout.flags & PLX_DP_OPTIM_SHARDED) != 0)
      partitioned += sum;
    else if (b.group == "dp")
      replicated += sum;
    else
      experts += sum;
  }
  const double norm = std::sqrt(replicated + sum_over_ep_(experts) + sum_over_dp_(partitioned));
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
  return norm;
}

}  // namespace plexus

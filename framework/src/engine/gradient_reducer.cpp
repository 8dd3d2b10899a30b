#include "engine/gradient_reducer.hpp"

#include <cstring>

#include <stdexcept>

#include "plexus/core/device.hpp"

namespace plexus {
namespace {

bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// Gradients averaged over a group smaller than dp (expert parallelism) come from CPU-only layers.
void scale_on_host(Tensor& flat, double scale) {
  if (flat.device().device_type != kDLCPU || !same_dtype(flat.dtype(), plx_dtype_f32()))
    throw std::runtime_error("gradients averaged over a group smaller than dp are scaled on the CPU in float32 only");
  float* values = flat.data<float>();
  const auto factor = static_cast<float>(scale);
  for (int64_t i = 0; i < flat.numel(); ++i) values[i] *= factor;
}

}  // namespace

GradientReducer::GradientReducer(ParameterStore& params, const distributed::Runtime& runtime, double bucket_mb)
    : params_(params), bucket_of_(params.size()) {
  const distributed::Communicator& dp = runtime.data_parallel();
  const auto group_of = [&](const Parameter& p) -> const distributed::Communicator& {
    if (p.grad_group == "dp") return dp;
    const distributed::Communicator* g = runtime.group(p.grad_group);
    if (g == nullptr)
      throw std::runtime_error("parameter " + p.name + " (declared by " + p.declared_by +
                               ") asks for its gradient to be averaged over the group \"" + p.grad_group +
                               "\", which the topology did not build");
    return *g;
  };
  const auto limit = static_cast<std::size_t>(bucket_mb * 1024.0 * 1024.0);
  std::size_t bytes = 0;
  for (std::size_t i = params.size(); i-- > 0;) {
    if (params[i].is_buffer()) continue;  // no gradient to average
    const Tensor& grad = params[i].grad;
    const distributed::Communicator& group = group_of(params[i]);
    const bool fits = !buckets_.empty() && bytes + grad.bytes() <= limit && buckets_.back().group == &group &&
                      same_dtype(params[buckets_.back().params.front()].grad.dtype(), grad.dtype());
    if (!fits) {
      buckets_.emplace_back();
      buckets_.back().group = &group;
      buckets_.back().scale = static_cast<double>(group.size()) / static_cast<double>(dp.size());
      bytes = 0;
    }
    buckets_.back().params.push_back(i);
    buckets_.back().offsets.push_back(bytes);
    bytes += grad.bytes();
    bucket_of_[i] = buckets_.size() - 1;
  }
  for (Bucket& bucket : buckets_) {
    const Tensor& first = params[bucket.params.front()].grad;
    int64_t elements = 0;
    for (std::size_t p : bucket.params) elements += params[p].grad.numel();
    bucket.flat = Tensor({elements}, first.dtype(), first.device());
  }
}

void GradientReducer::begin_step() {
  started_early_ = 0;
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.started = false;
  }
}

void GradientReducer::start(Bucket& bucket) {
  auto* flat = static_cast<std::byte*>(bucket.flat.raw());
  for (std::size_t k = 0; k < bucket.params.size(); ++k) {
    const Tensor& grad = params_[bucket.params[k]].grad;
    device::copy(flat + bucket.offsets[k], bucket.flat.device(), grad.raw(), grad.device(), grad.bytes());
  }
  bucket.request = bucket.group->start_all_reduce(bucket.flat.view(), distributed::ReduceOp::avg);
  bucket.started = true;
}

void GradientReducer::parameter_ready(std::size_t parameter) {
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  if (--bucket.pending == 0) {
    start(bucket);
    ++started_early_;
  }
}

void GradientReducer::finish() {
  // Buckets are started in one fixed order on every rank: those the hook did not start (none,
  // when backward touched every parameter) go now, in bucket order.
  for (Bucket& bucket : buckets_)
    if (!bucket.started) start(bucket);
  for (Bucket& bucket : buckets_) {
    bucket.request.wait();
    if (bucket.scale != 1.0) scale_on_host(bucket.flat, bucket.scale);
    const auto* flat = static_cast<const std::byte*>(bucket.flat.raw());
    for (std::size_t k = 0; k < bucket.params.size(); ++k) {
      Tensor& grad = params_[bucket.params[k]].grad;
      device::copy(grad.raw(), grad.device(), flat + bucket.offsets[k], bucket.flat.device(), grad.bytes());
    }
  }
}

}  // namespace plexus

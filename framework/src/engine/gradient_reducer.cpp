#include "engine/gradient_reducer.hpp"

#include <cstring>

#include "plexus/core/device.hpp"

namespace plexus {
namespace {

bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

}  // namespace

GradientReducer::GradientReducer(ParameterStore& params, const distributed::Communicator& group,
                                 double bucket_mb)
    : params_(params), group_(group), bucket_of_(params.size()) {
  const auto limit = static_cast<std::size_t>(bucket_mb * 1024.0 * 1024.0);
  std::size_t bytes = 0;
  for (std::size_t i = params.size(); i-- > 0;) {
    const Tensor& grad = params[i].grad;
    const bool fits = !buckets_.empty() && bytes + grad.bytes() <= limit &&
                      same_dtype(params[buckets_.back().params.front()].grad.dtype(), grad.dtype());
    if (!fits) {
      buckets_.emplace_back();
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
  bucket.request = group_.start_all_reduce(bucket.flat.view(), distributed::ReduceOp::avg);
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
    const auto* flat = static_cast<const std::byte*>(bucket.flat.raw());
    for (std::size_t k = 0; k < bucket.params.size(); ++k) {
      Tensor& grad = params_[bucket.params[k]].grad;
      device::copy(grad.raw(), grad.device(), flat + bucket.offsets[k], bucket.flat.device(), grad.bytes());
    }
  }
}

}  // namespace plexus

#include "engine/pipeline_link.hpp"

#include <stdexcept>

namespace plexus {
namespace {

// The largest tag every MPI implementation accepts (MPI_TAG_UB is at least this).
constexpr int64_t kLargestTag = 32767;

}  // namespace

PipelineLink::PipelineLink(const distributed::Communicator& group, uint32_t chunks)
    : group_(&group), chunks_(chunks) {}

std::string PipelineLink::name(Direction direction, uint32_t to, uint32_t mb) {
  return std::string(direction == Direction::forward ? "the input" : "the output gradient") + " of chunk " +
         std::to_string(to) + ", microbatch " + std::to_string(mb);
}

int32_t PipelineLink::tag(Direction direction, uint32_t to, uint32_t mb, uint32_t microbatches) const {
  const int64_t tag =
      (static_cast<int64_t>(to) * 2 + (direction == Direction::forward ? 0 : 1)) * microbatches + mb;
  if (tag > kLargestTag)
    throw std::runtime_error("pipeline transfer of " + name(direction, to, mb) + ": " +
                             std::to_string(chunks_) + " chunks x " + std::to_string(microbatches) +
                             " microbatches x 2 directions exceed the " + std::to_string(kLargestTag + 1) +
                             " message tags every comm backend offers");
  return static_cast<int32_t>(tag);
}

void PipelineLink::send(Direction direction, uint32_t from, uint32_t mb, uint32_t microbatches,
                        Tensor tensor) {
  const bool forward = direction == Direction::forward;
  if (forward ? from + 1 >= chunks_ : from == 0)
    throw std::runtime_error(std::string("pipeline: chunk ") + std::to_string(from) + " has no chunk " +
                             (forward ? "after" : "before") + " it to send to");
  const uint32_t to = forward ? from + 1 : from - 1;
  Transfer& t = sends_.emplace_back();
  t.tensor = std::move(tensor);
  t.request = group_->start_send(t.tensor.view(), static_cast<int32_t>(to % size()),
                                 tag(direction, to, mb, microbatches));
}

void PipelineLink::receive(Direction direction, uint32_t to, uint32_t mb, uint32_t microbatches,
                           std::vector<int64_t> shape, DLDataType dtype, DLDevice device) {
  const bool forward = direction == Direction::forward;
  if (forward ? to == 0 : to + 1 >= chunks_)
    throw std::runtime_error("pipeline: " + name(direction, to, mb) + " comes from no chunk (chunk " +
                             std::to_string(to) + (forward ? " starts the model)" : " ends the model)"));
  const Key key{direction, to, mb};
  if (receives_.contains(key))
    throw std::runtime_error("pipeline: " + name(direction, to, mb) + " is received twice");
  const uint32_t from = forward ? to - 1 : to + 1;
  Transfer& t = receives_[key];
  t.tensor = Tensor::uninitialized(std::move(shape), dtype, device);
  t.request = group_->start_recv(t.tensor.view(), static_cast<int32_t>(from % size()),
                                 tag(direction, to, mb, microbatches));
}

bool PipelineLink::expecting(Direction direction, uint32_t to, uint32_t mb) const {
  return receives_.contains(Key{direction, to, mb});
}

Tensor PipelineLink::take(Direction direction, uint32_t to, uint32_t mb) {
  const auto found = receives_.find(Key{direction, to, mb});
  if (found == receives_.end())
    throw std::runtime_error(
        "pipeline: " + name(direction, to, mb) +
        " is needed but was never received: at pp > 1 "
        "the scheduler must call recv_" +
        (direction == Direction::forward ? "forward" : "backward") +
        " before it (scheduler components 1f1b and interleaved_1f1b of plugin pipeline_schedules "
        "do; one written for a single stage does not)");
  found->second.request.wait();
  Tensor tensor = std::move(found->second.tensor);
  receives_.erase(found);
  return tensor;
}

void PipelineLink::finish() {
  for (Transfer& t : sends_) t.request.wait();
  sends_.clear();
  if (receives_.empty()) return;
  const auto& [direction, to, mb] = receives_.begin()->first;
  const std::string what = name(direction, to, mb);
  abandon();
  throw std::runtime_error("pipeline: " + what + " was received but never used in the step");
}

void PipelineLink::abandon() noexcept {
  receives_.clear();  // each request's destructor completes it
  sends_.clear();
}

}  // namespace plexus

// The transfers between pipeline stages (docs/architecture.md, "The model object"): a chunk's
// stream to the next stage in forward, its gradient to the previous one in backward, over the
// host's "pp" group. Every transfer is started at once (send and receive requests of the comm
// backend) and completed when its tensor is needed or at the end of the step, so the order in
// which stages make their calls cannot deadlock. A transfer is named by the chunk that receives
// it, its direction and its microbatch, which is its tag; chunk k's peer is pipeline rank k % pp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "plexus/core/distributed/communicator.hpp"
#include "plexus/core/engine/tensor.hpp"

namespace plexus {

class PipelineLink {
 public:
  enum class Direction : uint8_t { forward, backward };

  // `group`: the pp group (rank r is pipeline stage r); `chunks`: the model's chunks in all.
  PipelineLink(const distributed::Communicator& group, uint32_t chunks);
  PipelineLink(const PipelineLink&) = delete;
  PipelineLink& operator=(const PipelineLink&) = delete;

  uint32_t rank() const noexcept { return static_cast<uint32_t>(group_->rank()); }
  uint32_t size() const noexcept { return static_cast<uint32_t>(group_->size()); }
  const distributed::Communicator& group() const noexcept { return *group_; }

  // Starts sending `tensor` from chunk `from` to the chunk after it (forward) or before it
  // (backward), for microbatch `mb` of `microbatches`; the tensor is kept until sent.
  void send(Direction direction, uint32_t from, uint32_t mb, uint32_t microbatches, Tensor tensor);
  // Starts receiving chunk `to`'s tensor of that direction and microbatch into a new tensor.
  void receive(Direction direction, uint32_t to, uint32_t mb, uint32_t microbatches,
               std::vector<int64_t> shape, DLDataType dtype, DLDevice device);
  // Whether a receive was started and not yet taken; take waits for it and hands the tensor over.
  bool expecting(Direction direction, uint32_t to, uint32_t mb) const;
  Tensor take(Direction direction, uint32_t to, uint32_t mb);
  // Completes every send; a receive started but never taken is an error naming it.
  void finish();
  // Drops everything in flight after a failure (the requests are completed or abandoned).
  void abandon() noexcept;

 private:
  struct Transfer {
    Tensor tensor;
    distributed::Request request;
  };
  using Key = std::tuple<Direction, uint32_t, uint32_t>;  // direction, receiving chunk, microbatch
  int32_t tag(Direction direction, uint32_t to, uint32_t mb, uint32_t microbatches) const;
  static std::string name(Direction direction, uint32_t to, uint32_t mb);

  const distributed::Communicator* group_;
  uint32_t chunks_;
  std::map<Key, Transfer> receives_;
  std::vector<Transfer> sends_;
};

}  // namespace plexus

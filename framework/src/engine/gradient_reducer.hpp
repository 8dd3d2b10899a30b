// Data parallelism's gradient averaging, overlapped with backward.
//
// Parameters are grouped into buckets of about bucket_mb, in the reverse of their declaration
// order (the order backward finishes them). The model's gradient-ready hook counts down each
// bucket; when its last gradient is final the bucket is packed into one flat buffer and its
// all-reduce (AVG over the data-parallel group) is started, while backward runs on through the
// earlier layers. finish() waits for every bucket and copies the averages back.
//
// A parameter's gradient goes over its spec's grad_group ("dp" unless it says otherwise; a bucket
// holds one group's parameters). A group G smaller than dp holds parameters whose gradients
// already gather several data-parallel ranks' data (an MoE expert receives the tokens of every
// rank of its "ep" group): its sum over G is divided by the dp size, the mean over data-parallel
// ranks that the objective takes (the average over G times |G| / |dp|).
//
// Every rank has the same parameter shapes, groups, buckets and backward order (expert-parallel
// ranks hold different experts of the same shapes), so every rank starts the same all-reduces
// in the same order, which the comm contract requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plexus/core/distributed/communicator.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/parameters.hpp"

namespace plexus {

class GradientReducer {
 public:
  // Every grad_group named by a parameter must be one of the runtime's groups, else an error
  // naming the parameter and the group.
  GradientReducer(ParameterStore& params, const distributed::Runtime& runtime, double bucket_mb);

  void begin_step();
  void parameter_ready(std::size_t parameter);  // the model's hook
  void finish();                                // every bucket averaged and copied back

  std::size_t num_buckets() const noexcept { return buckets_.size(); }
  // How many buckets the last step started before finish() (the overlap achieved).
  std::size_t started_early() const noexcept { return started_early_; }

 private:
  struct Bucket {
    std::vector<std::size_t> params;
    std::vector<std::size_t> offsets;  // bytes into flat
    Tensor flat;
    const distributed::Communicator* group = nullptr;
    double scale = 1.0;  // applied after the average: |group| / |dp|
    std::size_t pending = 0;
    distributed::Request request;
    bool started = false;
  };
  void start(Bucket& bucket);

  ParameterStore& params_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  std::size_t started_early_ = 0;
};

}  // namespace plexus

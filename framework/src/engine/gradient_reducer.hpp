// Data parallelism's gradient averaging, overlapped with backward.
//
// Parameters are grouped into buckets of about bucket_mb, in the reverse of their declaration
// order (the order backward finishes them). The model's gradient-ready hook counts down each
// bucket; when its last gradient is final the bucket is packed into one flat buffer and its
// all-reduce (AVG over the data-parallel group) is started, while backward runs on through the
// earlier layers. finish() waits for every bucket and copies the averages back.
//
// Every rank has the same parameters, buckets and backward order, so every rank starts the
// same all-reduces in the same order, which the comm contract requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plexus/core/distributed/communicator.hpp"
#include "plexus/core/engine/parameters.hpp"

namespace plexus {

class GradientReducer {
 public:
  GradientReducer(ParameterStore& params, const distributed::Communicator& group, double bucket_mb);

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
    std::size_t pending = 0;
    distributed::Request request;
    bool started = false;
  };
  void start(Bucket& bucket);

  ParameterStore& params_;
  const distributed::Communicator& group_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  std::size_t started_early_ = 0;
};

}  // namespace plexus

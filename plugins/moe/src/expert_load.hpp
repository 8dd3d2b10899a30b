// The load of each expert over a training step, and the aux-loss-free expert bias that balances
// it (DeepSeek-V3; Megatron-LM's moe_router_enable_expert_bias).
//
// Every training forward adds the rows each expert took (after a capacity's drops) to the layer's
// counts; after the optimizer step the layer sums them over the "dp" group (every rank routes its
// own tokens, with or without expert parallelism, so the sum over dp is every token of the step),
// reports them, updates the bias from them and starts the next step at zero. The sum is of
// integers (exact in double below 2^53), so every rank gets the same counts and the same bias.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "plexus/cpp/group.hpp"
#include "plexus/host.h"

namespace plexus::moe {

class ExpertLoad {
 public:
  explicit ExpertLoad(int64_t experts) : counts_(static_cast<std::size_t>(experts), 0) {}

  // One training forward's rows per expert, from its permutation offsets [E + 1]. Any thread.
  void add(const std::vector<int64_t>& offsets);
  // The step's counts summed over the "dp" group (this rank's alone without a dp group of more
  // than one rank), and over `sequence` (under sequence parallelism the tp ranks holding the
  // microbatches' other tokens; one rank: none), and zero for the next step. Collective over
  // "dp" and `sequence`: every rank calls it. reduce: how to sum a vector over the dp group, where
  // the host's all_reduce of host memory cannot (a GPU comm backend); empty: that all_reduce.
  using Reduce = std::function<void(plx_group, std::vector<double>&)>;
  std::vector<double> take_global(const plx_host_api& host, const Reduce& reduce = {},
                                  const plexus::sdk::Group& sequence = {});

 private:
  std::mutex mutex_;
  std::vector<int64_t> counts_;
};

// bias_i += rate * sign(mean_j counts_j - counts_i): an expert that took fewer tokens than the
// mean is favoured in the next step's selection, one that took more is held back; one at the
// mean keeps its bias.
template <class T>
void update_expert_bias(T* bias, const std::vector<double>& counts, double rate);

}  // namespace plexus::moe

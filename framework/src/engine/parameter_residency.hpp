// Where a model's parameter values are while its stages run (docs/architecture.md, "A stage in
// one sentence"): whole in the store for the model's life, or with a data-parallel strategy that
// keeps this rank's shard and gathers an FSDP unit's whole values only around that unit's stages
// (engine/sharded_parameters.hpp). The model's stages call it at each unit's boundaries and
// never ask which it is; a change to FSDP touches the residency and the strategy plugin only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/parameters.hpp"
#include "plexus/core/engine/step_profile.hpp"

namespace plexus {

class ShardedParameters;

class ParameterResidency {
 public:
  // One microbatch's count, per group of units whose gradients are handed over together, of the
  // units whose gradient contributions are still to come.
  using Ledger = std::vector<uint32_t>;

  virtual ~ParameterResidency() = default;
  virtual Ledger start_microbatch() const = 0;
  // Around unit `unit`'s stages: before its first forward stage, after its last, and before its
  // first backward stage. `profile` times the waits (nullptr: untimed).
  virtual void acquire_for_forward(std::size_t unit, StepProfile* profile) = 0;
  virtual void release_after_forward(std::size_t unit) = 0;
  virtual void acquire_for_backward(std::size_t unit, StepProfile* profile) = 0;
  // One microbatch's contributions to the unit's gradients are complete: its backward ran, and
  // its weight gradients when they came apart.
  virtual void gradients_complete(Ledger& ledger, std::size_t unit, StepProfile* profile) = 0;
  // Calls write(p) for every parameter while its whole value is there to be written
  // (initialization, loading).
  virtual void write_each(const std::function<void(std::size_t)>& write) = 0;
  // The strategy's buffers, or nullptr when the values are whole in the store.
  virtual ShardedParameters* sharded() noexcept = 0;
};

// Every value whole in the store, always: nothing to acquire or hand over.
std::unique_ptr<ParameterResidency> make_whole_residency(ParameterStore& store);

// An FSDP unit as the model cuts it: its name, the model units it spans (a contiguous range) and
// every parameter those units use, in the order they declare them.
struct FsdpUnit {
  std::string name;
  std::size_t first_unit = 0, last_unit = 0;
  std::vector<std::size_t> params;
};

// The values held by the data-parallel strategy `strategy` (plexus/data_parallel.h), over the
// FSDP units `units` of a model of `num_units` units (engine/sharded_residency.cpp).
std::unique_ptr<ParameterResidency> make_sharded_residency(
    ParameterStore& store, const std::vector<FsdpUnit>& units, std::size_t num_units,
    const Component& strategy, plx_config options, const distributed::Runtime& runtime, DLDevice device);

}  // namespace plexus

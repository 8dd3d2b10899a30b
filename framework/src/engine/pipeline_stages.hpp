// What every pipeline stage holds, known on every stage (pipeline parallelism,
// docs/architecture.md): the whole model's parameters once each, in the order the whole model
// declares them (chunk by chunk), with the stage that owns each. A parameter two stages both hold
// (the last stage's copy of a tied embedding, Megatron's rule) is owned by the first. A
// checkpoint lists every tensor in this order whatever pp is, so its files do not depend on it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plexus/core/distributed/communicator.hpp"
#include "plexus/core/engine/parameters.hpp"

namespace plexus {

struct StageTensor {
  std::string name, te_name;
  std::vector<int64_t> shape;
  bool buffer = false;          // PLX_PARAM_BUFFER: a value, no moments
  bool divided = false;         // its gradient group is not "dp" (an expert divided over ep)
  uint32_t owner = 0;           // the first stage that holds it
  std::size_t owner_index = 0;  // its index in the owner stage's store
  int64_t local = -1;           // its index in this rank's store, when this stage owns it
};

struct PipelineStages {
  uint32_t stage = 0, stages = 1;
  std::vector<StageTensor> tensors;
  std::vector<std::size_t> stage_sizes;  // by stage: the parameters its store holds
  // By local parameter: whether another stage holds it too, and whether this stage owns it.
  std::vector<bool> shared, owned;
  bool holds_shared() const;
  // Collective over `pp`: the sum of every stage's `values` (one per parameter of its store) in
  // the whole model's order, each tensor's from its owner (a value another stage also holds counts once).
  double ordered_sum(const distributed::Communicator& pp, const std::vector<double>& values) const;
};

// Collective over the pp group: every stage's parameters, with `chunk_of` the model chunk of each
// of this rank's parameters (Model::parameter_chunks).
PipelineStages gather_pipeline_stages(const distributed::Communicator& pp, const ParameterStore& params,
                                      const std::vector<uint32_t>& chunk_of);

}  // namespace plexus

// Cutting the model into FSDP units for a data-parallel strategy (engine/sharded_parameters.hpp).
#include <string>

#include "engine/model_internal.hpp"
#include "plexus/core/config.hpp"

namespace plexus {

void Model::shard_parameters(const Component& strategy, plx_config options, int64_t layers_per_unit,
                             const distributed::Runtime& runtime) {
  const std::string key = "distributed.data_parallel.layers_per_unit";
  // logical_units_: the embedding, the decoder's logical layers, the final norm, the head.
  const auto decoder_layers = static_cast<int64_t>(logical_units_.size()) - 3;
  if (layers_per_unit < 1)
    throw config::ConfigError(key, "expected 1 or more logical layers per unit, got " + std::to_string(layers_per_unit));
  if (layers_per_unit > 1 && layers_per_unit >= decoder_layers)
    throw config::ConfigError(
        key, std::to_string(layers_per_unit) + " would make the whole decoder (" + std::to_string(decoder_layers) +
                 " logical layers) one unit, whose values would then be gathered whole for every layer's "
                 "forward and backward: choose fewer layers per unit (1 is a unit per logical layer)");
  if (decoder_layers % layers_per_unit != 0)
    throw config::ConfigError(key, std::to_string(layers_per_unit) + " does not divide the decoder's " +
                                       std::to_string(decoder_layers) +
                                       " logical layers; every unit must hold the same number of layers");
  std::vector<ShardedParameters::UnitSpec> specs;
  fsdp_of_.assign(units_.size(), 0);
  fsdp_first_.assign(units_.size(), false);
  fsdp_last_.assign(units_.size(), false);
  const auto add_unit = [&](std::string name, std::size_t first_logical, std::size_t logical_count) {
    ShardedParameters::UnitSpec spec;
    spec.name = std::move(name);
    const std::size_t first = logical_units_[first_logical].first;
    const LogicalUnit& end = logical_units_[first_logical + logical_count - 1];
    const std::size_t last = end.first + end.count - 1;
    for (std::size_t u = first; u <= last; ++u) {
      fsdp_of_[u] = specs.size();
      for (std::size_t p : units_[u]->gradient_params) spec.params.push_back(p);
    }
    fsdp_first_[first] = true;
    fsdp_last_[last] = true;
    specs.push_back(std::move(spec));
  };
  add_unit("embedding", 0, 1);
  for (int64_t l = 0; l < decoder_layers; l += layers_per_unit) {
    const std::size_t first = logical_units_[1 + static_cast<std::size_t>(l)].first;
    const Unit& unit = *units_[first];
    // "decoder.layers.4", or "decoder.layers.4-5" for a unit of two logical layers.
    std::string name = "decoder.layers." + std::to_string(unit.logical);
    if (layers_per_unit > 1) name.append(1, '-').append(std::to_string(unit.logical + layers_per_unit - 1));
    add_unit(name, 1 + static_cast<std::size_t>(l), static_cast<std::size_t>(layers_per_unit));
  }
  add_unit("output layers", logical_units_.size() - 2, 2);
  sharded_ = std::make_unique<ShardedParameters>(params_, specs, strategy, options, runtime, device_);
}

}  // namespace plexus

// The constants of one AdamW step (clipping factor from the global gradient norm, bias
// corrections, learning rate), shared by the whole-model optimizer (adamw.cpp) and the one on a
// data-parallel strategy's shards (sharded_adamw.cpp). `decay` is left for each parameter.
#pragma once

#include <cstdint>

#include "engine/vector_ops.hpp"
#include "plexus/core/engine/optimizer.hpp"

namespace plexus {

vector_ops::AdamWStep adamw_step_constants(const OptimizerSettings& s, int64_t step, double grad_norm);

}  // namespace plexus

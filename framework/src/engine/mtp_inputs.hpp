// Multi-token prediction's inputs, stated once for the model (which rolls whole sequences it
// holds) and the trainer (which rolls them before cutting a sequence over context-parallel ranks,
// since a rank's chunks are not contiguous and depth d reads tokens d places further on).
#pragma once

#include <cstdint>

#include "plexus/core/engine/tensor.hpp"

namespace plexus {

// Depth `depth`'s tokens and targets [rows, S] (int32, on the CPU): each row of `tokens` and
// `targets` rolled `depth` places to the left, the vacated last places holding token 0 and target
// -1 (ignored by the head: Megatron rolls the loss mask with them). The outputs must have the
// inputs' shape.
void roll_for_mtp_depth(const Tensor& tokens, const Tensor& targets, uint32_t depth, Tensor& rolled_tokens,
                        Tensor& rolled_targets);

}  // namespace plexus

// Token dropping under an expert capacity (moe_expert_capacity_factor, Megatron-LM's
// apply_router_token_dropping): an expert routed more than its capacity of (token, choice) pairs
// keeps those of highest probability (policy "probs"; ties to the earlier token) or those of the
// earliest tokens (policy "position"), and the rest are dropped: their probability counts as 0
// (the others are not renormalized), they get no row in the permutation, and their token's
// output has only its other experts' terms. The auxiliary loss still counts every routed pair.
#pragma once

#include <cstdint>
#include <vector>

#include "config.hpp"

namespace plexus::moe {

// kept [T k]: 1 for a pair its expert keeps. Returns the number of dropped pairs.
template <class T>
int64_t apply_capacity(const MoeConfig& c, int64_t tokens, const int32_t* chosen, const T* probs,
                       std::vector<uint8_t>& kept);

}  // namespace plexus::moe

// Context parallelism's load-balanced layout (Megatron's get_batch_on_this_cp_rank; the SDK's
// plexus/cpp/context_parallel.hpp states it for the layers): each sequence is cut into 2 cp
// chunks and cp rank r keeps chunks r and 2 cp - 1 - r, in that order, so that under the causal
// mask every rank has the same share of the attention's work.
#pragma once

#include <cstdint>

#include "plexus/core/engine/tensor.hpp"

namespace plexus {

// local [rows, S / cp] = this rank's two chunks of each row of whole [rows, S] (int32).
void take_context_parallel_chunks(const Tensor& whole, Tensor& local, int64_t rank, int64_t size);

}  // namespace plexus

// Expert tensor parallelism (Megatron's expert_tensor_parallel_size, here equal to tp): every
// expert's fc1 is split on its rows (SwiGLU [gate_r; up_r]) and its fc2 on its columns over the
// "expert_tp" group, so each rank computes 1/t of every local expert's width for the rows of
// every rank of the group. After routing (and the ep exchange) a rank's rows of each local expert
// are all-gathered over expert_tp, the experts' shards run on all of them, and their partial
// outputs are summed back to the rows' own ranks by a reduce-scatter; the backward the same with
// the output gradients and the input gradients' parts. Megatron's AlltoAll dispatcher does this
// in dispatch_postprocess / combine_preprocess (an all-gather and reduce-scatter with uneven
// splits); here each rank's rows are padded to the largest rank's count, so both are the
// collectives of equal blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "plexus/cpp/group.hpp"

namespace plexus::moe {

// Who holds how many rows of which local expert, for one microbatch.
struct EtpLayout {
  int32_t ranks = 1, rank = 0;
  int64_t experts = 0;           // local experts
  std::vector<int64_t> counts;   // [ranks * experts]: rank r's rows of expert e at r * experts + e
  std::vector<int64_t> offsets;  // [experts + 1]: expert e's block of the gathered, expert-major rows
  int64_t block = 0;             // the most rows a rank holds: each rank's padded block
  int64_t total() const { return offsets.empty() ? 0 : offsets.back(); }
  int64_t own() const;  // this rank's rows

  // From this rank's expert-major offsets ([experts + 1]); every rank's counts all-gathered
  // over `group` (blocking).
  static EtpLayout build(const plexus::sdk::Group& group, const std::vector<int64_t>& own_offsets);
};

// x [own rows, cols] (expert-major) of every rank into `all` [total, cols] (expert-major over
// every rank's rows: expert e's rows of rank 0, then rank 1's, ...). `padded` is scratch of
// ranks * block * cols.
template <class T>
void etp_gather_rows(const plexus::sdk::Group& group, const EtpLayout& l, const T* x, int64_t cols, T* all,
                     std::vector<T>& padded);
// The inverse, summing: every rank's `all` [total, cols] put back in the ranks' order and summed
// over the group, this rank keeping its own rows in `y` [own rows, cols].
template <class T>
void etp_scatter_sum_rows(const plexus::sdk::Group& group, const EtpLayout& l, const T* all, int64_t cols,
                          T* y, std::vector<T>& padded);

}  // namespace plexus::moe

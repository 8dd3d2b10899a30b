// Expert parallelism's row exchange: the ep group's ranks each hold E / ep experts (rank r the
// global experts r E/ep ..), and the permuted rows of every rank travel to the rank of their
// expert and back through the host's all_to_all_v over the "ep" group.
//
// After the permutation a rank's rows are sorted by global expert, so the rows for rank r are
// one contiguous block (experts r L .. (r+1) L - 1, L = E / ep). What arrives is source-major:
// from source 0 its rows of local expert 0, 1, .., then source 1's, ... The grouped expert
// product wants expert-major blocks, so the received rows are regrouped (and the results
// regrouped back before they return): Megatron's sort_chunks_by_idxs after its all-to-all.
#pragma once

#include <cstdint>
#include <vector>

#include "plexus/host.h"

namespace plexus::moe {

// This rank's place in the "ep" group.
struct ExpertGroup {
  plx_group group = nullptr;  // null when there is no ep group of more than one rank
  int32_t rank = 0, size = 1;
  int64_t local_experts = 0, first_expert = 0;  // L = E / ep and r L

  // The ep group through the host (size 1 without one); E must divide evenly over it, else an
  // Error naming both numbers.
  static ExpertGroup find(const plx_host_api& host, int64_t experts);
  bool parallel() const { return size > 1; }
};

// Who sends how many rows where, for one microbatch, built from every rank's rows per expert.
struct ExchangeLayout {
  int64_t ranks = 0, local_experts = 0;
  std::vector<int64_t> send_rows, send_offsets;  // [ranks]: this rank's rows for each rank
  std::vector<int64_t> recv_rows, recv_offsets;  // [ranks]: rows arriving from each rank
  // [ranks * L], index s L + j: the rows of local expert j from source s, and where that chunk
  // sits in the source-major (received) and the expert-major (grouped product) order.
  std::vector<int64_t> chunk_rows, source_offset, expert_offset;
  std::vector<int64_t> expert_offsets;  // [L + 1]: local expert j's block in expert-major order

  int64_t received() const { return expert_offsets.empty() ? 0 : expert_offsets.back(); }
  int64_t sent() const { return send_offsets.empty() ? 0 : send_offsets.back() + send_rows.back(); }

  // perm_offsets: this rank's permutation offsets over the E global experts ([E + 1]);
  // arrived: [ranks * L] rows per (source, local expert), from the counts' exchange.
  static ExchangeLayout build(const ExpertGroup& g, const std::vector<int64_t>& perm_offsets,
                              const std::vector<int64_t>& arrived);
};

// The counts' exchange (blocking; ranks * L integers): what each source sends each of this
// rank's local experts.
std::vector<int64_t> exchange_counts(const plx_host_api& host, const ExpertGroup& g,
                                     const std::vector<int64_t>& perm_offsets, plx_stream stream);

// Starts the all-to-all of rows of `cols` elements: send_rows[r] rows from send + send_offsets[r]
// to rank r, recv_rows[s] rows from rank s into recv + recv_offsets[s]. The buffers must live
// until the request is waited on. Returns the request (never null).
template <class T>
plx_request start_rows_exchange(const plx_host_api& host, const ExpertGroup& g, const T* send,
                                const std::vector<int64_t>& send_rows, const std::vector<int64_t>& send_offsets,
                                T* recv, const std::vector<int64_t>& recv_rows,
                                const std::vector<int64_t>& recv_offsets, int64_t cols, plx_stream stream);

// Completes a request started above and nulls it (a null one: nothing to do); a failure keeps
// the host's message.
void wait_exchange(const plx_host_api& host, plx_request& request);

// Source-major rows to expert-major rows and back ([received, cols] each).
template <class T>
void to_expert_major(const ExchangeLayout& l, int64_t cols, const T* source_major, T* expert_major);
template <class T>
void to_source_major(const ExchangeLayout& l, int64_t cols, const T* expert_major, T* source_major);

}  // namespace plexus::moe

// The index arithmetic of the GPU's permutation (src/cuda/permutation.cu): a counting sort of the
// T k (token, choice) pairs by expert, stable in token order, the same rows as the CPU's
// Permutation::build (dropless). Plain functions of a "worker" (one thread of the one block that
// sorts), so the kernel and a host check (tests/unit/test_moe_sort_by_expert.cpp) run the same code:
//
//   1. count_chunk    each worker counts its contiguous chunk of pairs per expert
//   2. total_expert   each expert's total over the workers, in worker order
//      prefix_offsets one worker: the experts' first rows (an exclusive prefix sum)
//      start_rows     each (worker, expert)'s first row: the expert's first row plus the counts of
//                     the earlier workers
//   3. place_chunk    each worker places its chunk's pairs, in order, from its start rows
//
// A barrier separates the phases. No atomics: which row a pair gets depends only on the routing,
// never on timing, so every run is the same.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PLEXUS_MOE_HD __host__ __device__
#else
#define PLEXUS_MOE_HD
#endif

namespace plexus::moe::sort {

struct SortShape {
  int64_t pairs = 0;    // T k
  int64_t topk = 1;     // k: pair i is token i / k's choice i % k
  int64_t experts = 1;  // E
  int64_t workers = 1;  // the block's threads
  PLEXUS_MOE_HD int64_t chunk() const { return (pairs + workers - 1) / workers; }
  // Worker w's pairs: [first(w), first(w + 1)), contiguous, in worker order.
  PLEXUS_MOE_HD int64_t first(int64_t w) const { return w * chunk() < pairs ? w * chunk() : pairs; }
};

// cursor: [workers, E] scratch; worker w's counts per expert (written).
PLEXUS_MOE_HD inline void count_chunk(const SortShape& s, int64_t w, const int32_t* chosen, int64_t* cursor) {
  int64_t* mine = cursor + w * s.experts;
  for (int64_t e = 0; e < s.experts; ++e) mine[e] = 0;
  for (int64_t i = s.first(w); i < s.first(w + 1); ++i) ++mine[chosen[i]];
}

// offsets[e + 1] = the pairs of expert e over every worker.
PLEXUS_MOE_HD inline void total_expert(const SortShape& s, int64_t e, const int64_t* cursor, int64_t* offsets) {
  int64_t total = 0;
  for (int64_t w = 0; w < s.workers; ++w) total += cursor[w * s.experts + e];
  offsets[e + 1] = total;
}

// offsets [E + 1]: expert e owns rows [offsets[e], offsets[e + 1]).
PLEXUS_MOE_HD inline void prefix_offsets(const SortShape& s, int64_t* offsets) {
  offsets[0] = 0;
  for (int64_t e = 0; e < s.experts; ++e) offsets[e + 1] += offsets[e];
}

// cursor[w, e] becomes worker w's first row for expert e.
PLEXUS_MOE_HD inline void start_rows(const SortShape& s, int64_t e, const int64_t* offsets, int64_t* cursor) {
  int64_t row = offsets[e];
  for (int64_t w = 0; w < s.workers; ++w) {
    const int64_t count = cursor[w * s.experts + e];
    cursor[w * s.experts + e] = row;
    row += count;
  }
}

// row_token [T k]: the token of each row; slot_row [T k]: the row of pair i.
PLEXUS_MOE_HD inline void place_chunk(const SortShape& s, int64_t w, const int32_t* chosen, int64_t* cursor,
                                      int64_t* row_token, int64_t* slot_row) {
  int64_t* mine = cursor + w * s.experts;
  for (int64_t i = s.first(w); i < s.first(w + 1); ++i) {
    const int64_t r = mine[chosen[i]]++;
    row_token[r] = i / s.topk;
    slot_row[i] = r;
  }
}

}  // namespace plexus::moe::sort

// The index arithmetic of the GPU's permutation (src/cuda/permutation.cu): a counting sort of the
// T k (token, choice) pairs by expert, stable in token order, the same rows as the CPU's
// Permutation::build (a pair a capacity dropped, kept[i] == 0, gets no row). Plain functions of a "worker"
// (one thread of the one block that sorts), so the kernel and a host check
// (tests/unit/test_moe_sort_by_expert.cpp) run the same code:
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

// cursor: [workers, E] scratch; worker w's counts per expert (written). kept [T k]: 0 for a
// dropped pair, or null (dropless).
PLEXUS_MOE_HD inline void count_chunk(const SortShape& s, int64_t w, const int32_t* chosen,
                                      const uint8_t* kept, int64_t* cursor) {
  int64_t* mine = cursor + w * s.experts;
  for (int64_t e = 0; e < s.experts; ++e) mine[e] = 0;
  for (int64_t i = s.first(w); i < s.first(w + 1); ++i)
    if (kept == nullptr || kept[i] != 0) ++mine[chosen[i]];
}

// offsets[e + 1] = the pairs of expert e over every worker.
PLEXUS_MOE_HD inline void total_expert(const SortShape& s, int64_t e, const int64_t* cursor,
                                       int64_t* offsets) {
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

// row_token [rows]: the token of each row; row_pair [rows] (may be null): its pair; slot_row
// [T k]: the row of pair i, -1 for a dropped pair.
PLEXUS_MOE_HD inline void place_chunk(const SortShape& s, int64_t w, const int32_t* chosen,
                                      const uint8_t* kept, int64_t* cursor, int64_t* row_token,
                                      int64_t* row_pair, int64_t* slot_row) {
  int64_t* mine = cursor + w * s.experts;
  for (int64_t i = s.first(w); i < s.first(w + 1); ++i) {
    if (kept != nullptr && kept[i] == 0) {
      slot_row[i] = -1;
      continue;
    }
    const int64_t r = mine[chosen[i]]++;
    row_token[r] = i / s.topk;
    if (row_pair != nullptr) row_pair[r] = i;
    slot_row[i] = r;
  }
}

// A capacity's choice for pair i (capacity.cpp's apply_capacity), from the dropless sort
// (offsets, row_pair, slot_row): an expert with at most `capacity` pairs keeps them all; else it
// keeps its first `capacity` rows (by position: rows are in token order), or the pairs with
// fewer than `capacity` rows ahead of them by probability, ties to the earlier row (by probs).
PLEXUS_MOE_HD inline uint8_t keeps(int64_t i, int64_t capacity, bool by_position, const int32_t* chosen,
                                   const float* probs, const int64_t* offsets, const int64_t* row_pair,
                                   const int64_t* slot_row) {
  const int64_t lo = offsets[chosen[i]], hi = offsets[chosen[i] + 1], r = slot_row[i];
  if (hi - lo <= capacity) return 1;
  if (by_position) return r - lo < capacity ? 1 : 0;
  const float p = probs[i];
  int64_t ahead = 0;
  for (int64_t q = lo; q < hi && ahead < capacity; ++q) {
    const float pq = probs[row_pair[q]];
    if (pq > p || (pq == p && q < r)) ++ahead;
  }
  return ahead < capacity ? 1 : 0;
}

}  // namespace plexus::moe::sort

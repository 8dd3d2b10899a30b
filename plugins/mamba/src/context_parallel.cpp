#include "context_parallel.hpp"

#include <algorithm>
#include <functional>

#include "plexus/cpp/context_parallel.hpp"

namespace plexus::mamba {
namespace {

// Calls visit(whole offset, slice offset, run length) for every contiguous run of the slice,
// in the slice's row-major order.
void for_each_run(const plx_param_spec& shard, int32_t rank, int32_t ranks,
                  const std::function<void(int64_t, int64_t, int64_t)>& visit) {
  const int32_t ndim = shard.desc.ndim;
  int64_t count = 1;
  for (int32_t d = 0; d < ndim; ++d) count *= shard.desc.dims[d];
  if ((shard.flags & PLX_PARAM_TENSOR_PARALLEL) == 0) return visit(0, 0, count);
  const int32_t dim = shard.tp_dim;
  int64_t outer = 1, inner = 1;
  for (int32_t d = 0; d < dim; ++d) outer *= shard.desc.dims[d];
  for (int32_t d = dim + 1; d < ndim; ++d) inner *= shard.desc.dims[d];
  // The whole dimension's parts, and each part's slice for this rank.
  const int64_t whole_dim = shard.desc.dims[dim] * ranks;
  // No parts: one, the whole dimension.
  const uint32_t num_parts = shard.tp_num_parts > 0 ? shard.tp_num_parts : 1;
  const auto part_size = [&](uint32_t k) {
    return shard.tp_num_parts > 0 ? shard.tp_part_sizes[k] : whole_dim;
  };
  int64_t at_slice = 0;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t part_first = 0;
    for (uint32_t k = 0; k < num_parts; ++k) {
      const int64_t part = part_size(k);
      const int64_t share = part / ranks;
      const int64_t whole_row = o * whole_dim + part_first + rank * share;
      visit(whole_row * inner, at_slice, share * inner);
      at_slice += share * inner;
      part_first += part;
    }
  }
}

}  // namespace

template <class T>
void cp_rows_to_sequence(const T* rank_major, T* sequence, int64_t batch, int64_t seq_local, int64_t cols,
                         int32_t ranks) {
  const int64_t seq = seq_local * ranks;
  for (int32_t r = 0; r < ranks; ++r)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < seq_local; ++t)
        std::copy_n(
            rank_major + ((r * batch + b) * seq_local + t) * cols, cols,
            sequence + (b * seq + plexus::sdk::context_parallel_position(t, seq_local, r, ranks)) * cols);
}

template <class T>
void cp_rows_to_rank_major(const T* sequence, T* rank_major, int64_t batch, int64_t seq_local, int64_t cols,
                           int32_t ranks) {
  const int64_t seq = seq_local * ranks;
  for (int32_t r = 0; r < ranks; ++r)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < seq_local; ++t)
        std::copy_n(
            sequence + (b * seq + plexus::sdk::context_parallel_position(t, seq_local, r, ranks)) * cols,
            cols, rank_major + ((r * batch + b) * seq_local + t) * cols);
}

template <class T>
void cp_take_slice(const plx_param_spec& shard, const T* whole, int32_t rank, int32_t ranks, T* out) {
  for_each_run(shard, rank, ranks,
               [&](int64_t from, int64_t to, int64_t count) { std::copy_n(whole + from, count, out + to); });
}

template <class T>
void cp_add_slice(const plx_param_spec& shard, const T* slice, int32_t rank, int32_t ranks, T scale,
                  T* whole) {
  for_each_run(shard, rank, ranks, [&](int64_t to, int64_t from, int64_t count) {
    for (int64_t i = 0; i < count; ++i) whole[to + i] += scale * slice[from + i];
  });
}

#define PLEXUS_MAMBA_CP(T)                                                                  \
  template void cp_rows_to_sequence<T>(const T*, T*, int64_t, int64_t, int64_t, int32_t);   \
  template void cp_rows_to_rank_major<T>(const T*, T*, int64_t, int64_t, int64_t, int32_t); \
  template void cp_take_slice<T>(const plx_param_spec&, const T*, int32_t, int32_t, T*);    \
  template void cp_add_slice<T>(const plx_param_spec&, const T*, int32_t, int32_t, T, T*);
PLEXUS_MAMBA_CP(float)
PLEXUS_MAMBA_CP(double)
#undef PLEXUS_MAMBA_CP

}  // namespace plexus::mamba

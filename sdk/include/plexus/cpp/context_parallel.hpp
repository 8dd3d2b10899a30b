// The host's context-parallel layout (ABI 1.9): with a "cp" group of c > 1 ranks, every
// sequence of S tokens is cut into 2c chunks of S / 2c, and cp rank r holds chunks r and
// 2c - 1 - r, in that order (Megatron-LM's load-balanced layout), so a layer gets
// [batch, S / c, ...] per call. Layers that look across tokens place them with this.
#ifndef PLEXUS_CPP_CONTEXT_PARALLEL_HPP
#define PLEXUS_CPP_CONTEXT_PARALLEL_HPP

#include <cstdint>

namespace plexus::sdk {

// The global position of token t (0 <= t < seq_local) of cp rank `rank` of `ranks`, where
// seq_local = S / ranks is what the rank holds of each sequence.
inline int64_t context_parallel_position(int64_t t, int64_t seq_local, int32_t rank, int32_t ranks) {
  const int64_t chunk = seq_local / 2;
  return (t < chunk ? rank : 2 * ranks - 1 - rank) * chunk + t % chunk;
}

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_CONTEXT_PARALLEL_HPP

// Counter-based random numbers (Philox4x32-10): a value depends only on (key, counter), so a
// seed gives the same run on any machine, thread count or load order, and any element of a
// parameter can be drawn independently.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace plexus {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) noexcept;

// A stream of numbers keyed by (seed, stream id). Element i of the stream is a pure function.
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream) noexcept;
  double uniform(uint64_t index) const noexcept;  // [0, 1)
  double normal(uint64_t index) const noexcept;   // standard normal (Box-Muller)
  uint64_t bits(uint64_t index) const noexcept;

 private:
  std::array<uint32_t, 2> key_;
  uint64_t stream_;
};

// A stable 64-bit hash of a name (FNV-1a), e.g. to key a parameter's stream by its name.
uint64_t stable_hash(std::string_view text) noexcept;

}  // namespace plexus

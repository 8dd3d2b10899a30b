#include "plexus/core/engine/random.hpp"

#include <cmath>

namespace plexus {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) noexcept {
  // Constants of Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11).
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

CounterRng::CounterRng(uint64_t seed, uint64_t stream) noexcept
    : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}, stream_(stream) {}

uint64_t CounterRng::bits(uint64_t index) const noexcept {
  const auto out = philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                               static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
                              key_);
  return (static_cast<uint64_t>(out[0]) << 32) | out[1];
}

double CounterRng::uniform(uint64_t index) const noexcept {
  return static_cast<double>(bits(index) >> 11) * 0x1.0p-53;  // 53 random mantissa bits
}

double CounterRng::normal(uint64_t index) const noexcept {
  // Two uniforms from one Philox block; u1 in (0, 1] so the log is finite.
  const auto out = philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                               static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
                              key_);
  const double u1 = (static_cast<double>((static_cast<uint64_t>(out[0]) << 21) ^ out[1]) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>((static_cast<uint64_t>(out[2]) << 21) ^ out[3]) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t stable_hash(std::string_view text) noexcept {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace plexus

// XXH64 from its specification: four accumulators ("lanes") consume 32-byte stripes, are merged
// into one, which then takes the remaining 8-, 4- and 1-byte pieces, and a final avalanche mixes
// every input bit into every output bit. All input words are little-endian (the core builds only
// for little-endian hosts), read with memcpy so any alignment is fine.
#include "plexus/core/xxhash64.hpp"

#include <bit>
#include <cstring>

namespace plexus {
namespace {

static_assert(std::endian::native == std::endian::little, "XXH64 reads little-endian words");

constexpr std::uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr std::uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr std::uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr std::uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr std::uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;

std::uint64_t read64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::uint32_t read32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// One lane consuming one 8-byte word.
constexpr std::uint64_t round(std::uint64_t acc, std::uint64_t lane) noexcept {
  acc += lane * kPrime2;
  acc = std::rotl(acc, 31);
  return acc * kPrime1;
}

// Folds a lane's accumulator into the merged one.
constexpr std::uint64_t merge(std::uint64_t acc, std::uint64_t lane) noexcept {
  acc ^= round(0, lane);
  return acc * kPrime1 + kPrime4;
}

}  // namespace

std::uint64_t xxh64(std::span<const std::byte> bytes, std::uint64_t seed) noexcept {
  const std::byte* p = bytes.data();
  const std::size_t size = bytes.size();
  const std::byte* const end = p + size;
  std::uint64_t acc = 0;
  if (size >= 32) {
    std::uint64_t v1 = seed + kPrime1 + kPrime2;
    std::uint64_t v2 = seed + kPrime2;
    std::uint64_t v3 = seed;
    std::uint64_t v4 = seed - kPrime1;
    const std::byte* const last_stripe = end - 32;
    // The four lanes are independent, so the CPU overlaps their multiplications.
    for (; p <= last_stripe; p += 32) {
      v1 = round(v1, read64(p));
      v2 = round(v2, read64(p + 8));
      v3 = round(v3, read64(p + 16));
      v4 = round(v4, read64(p + 24));
    }
    acc = std::rotl(v1, 1) + std::rotl(v2, 7) + std::rotl(v3, 12) + std::rotl(v4, 18);
    acc = merge(acc, v1);
    acc = merge(acc, v2);
    acc = merge(acc, v3);
    acc = merge(acc, v4);
  } else {
    acc = seed + kPrime5;
  }
  acc += static_cast<std::uint64_t>(size);
  for (; end - p >= 8; p += 8) {
    acc ^= round(0, read64(p));
    acc = std::rotl(acc, 27) * kPrime1 + kPrime4;
  }
  if (end - p >= 4) {
    acc ^= static_cast<std::uint64_t>(read32(p)) * kPrime1;
    acc = std::rotl(acc, 23) * kPrime2 + kPrime3;
    p += 4;
  }
  for (; p < end; ++p) {
    acc ^= static_cast<std::uint64_t>(std::to_integer<unsigned char>(*p)) * kPrime5;
    acc = std::rotl(acc, 11) * kPrime1;
  }
  // The avalanche.
  acc ^= acc >> 33;
  acc *= kPrime2;
  acc ^= acc >> 29;
  acc *= kPrime3;
  acc ^= acc >> 32;
  return acc;
}

std::uint64_t xxh64(std::string_view text, std::uint64_t seed) noexcept {
  return xxh64(std::as_bytes(std::span<const char>(text.data(), text.size())), seed);
}

std::string hex64(std::uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (std::size_t i = 16; i-- > 0; value >>= 4U) text[i] = kDigits[value & 0xFU];
  return text;
}

bool parse_hex64(std::string_view text, std::uint64_t& value) noexcept {
  if (text.size() != 16) return false;
  std::uint64_t v = 0;
  for (const char c : text) {
    unsigned digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<unsigned>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<unsigned>(c - 'A' + 10);
    } else {
      return false;
    }
    v = (v << 4U) | digit;
  }
  value = v;
  return true;
}

}  // namespace plexus

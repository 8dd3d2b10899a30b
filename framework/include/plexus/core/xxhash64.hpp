// XXH64, the 64-bit hash of the xxHash family, written from its specification
// (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md, "XXH64 Algorithm
// Description"). Plexus uses it to detect damage, not attacks: the per-tensor checksums of
// safetensors checkpoints and the fingerprint of the tokenizer a dataset was prepared with.
//
// Why XXH64 rather than CRC-32C: it runs at memory speed on any 64-bit CPU with plain integer
// instructions (four independent multiply-rotate lanes, no table and no special instruction), so
// hashing a tensor as it is written costs a small fraction of writing it; and 64 bits make an
// accidental match of damaged bytes practically impossible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace plexus {

// The XXH64 hash of bytes with seed, as the reference implementation's XXH64(data, size, seed).
[[nodiscard]] std::uint64_t xxh64(std::span<const std::byte> bytes, std::uint64_t seed = 0) noexcept;
[[nodiscard]] std::uint64_t xxh64(std::string_view text, std::uint64_t seed = 0) noexcept;

// 16 lowercase hex digits, most significant first (as xxhsum prints XXH64).
[[nodiscard]] std::string hex64(std::uint64_t value);
// The value of 16 hex digits (either case), or false when text is anything else.
[[nodiscard]] bool parse_hex64(std::string_view text, std::uint64_t& value) noexcept;

}  // namespace plexus

// Megatron's token dtype codes and the file names of a dataset prefix.
#include <bit>
#include <limits>

#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {

static_assert(std::endian::native == std::endian::little,
              "Megatron indexed datasets are little-endian and are mapped as they are");

std::size_t dtype_size(TokenDtype dtype) noexcept {
  switch (dtype) {
    case TokenDtype::uint8:
    case TokenDtype::int8: return 1;
    case TokenDtype::int16:
    case TokenDtype::uint16: return 2;
    case TokenDtype::int32:
    case TokenDtype::float32: return 4;
    case TokenDtype::int64:
    case TokenDtype::float64: return 8;
  }
  return 0;
}

std::string_view dtype_name(TokenDtype dtype) noexcept {
  switch (dtype) {
    case TokenDtype::uint8: return "uint8";
    case TokenDtype::int8: return "int8";
    case TokenDtype::int16: return "int16";
    case TokenDtype::int32: return "int32";
    case TokenDtype::int64: return "int64";
    case TokenDtype::float64: return "float64";
    case TokenDtype::float32: return "float32";
    case TokenDtype::uint16: return "uint16";
  }
  return "?";
}

std::optional<TokenDtype> dtype_from_code(uint8_t code) noexcept {
  if (code < 1 || code > 8) return std::nullopt;
  return static_cast<TokenDtype>(code);
}

std::optional<TokenDtype> dtype_from_name(std::string_view name) noexcept {
  for (uint8_t code = 1; code <= 8; ++code) {
    const auto dtype = static_cast<TokenDtype>(code);
    if (dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

bool is_integer_dtype(TokenDtype dtype) noexcept {
  return dtype != TokenDtype::float32 && dtype != TokenDtype::float64;
}

int64_t dtype_min(TokenDtype dtype) noexcept {
  switch (dtype) {
    case TokenDtype::uint8:
    case TokenDtype::uint16: return 0;
    case TokenDtype::int8: return std::numeric_limits<int8_t>::min();
    case TokenDtype::int16: return std::numeric_limits<int16_t>::min();
    case TokenDtype::int32: return std::numeric_limits<int32_t>::min();
    default: return std::numeric_limits<int64_t>::min();
  }
}

int64_t dtype_max(TokenDtype dtype) noexcept {
  switch (dtype) {
    case TokenDtype::uint8: return std::numeric_limits<uint8_t>::max();
    case TokenDtype::uint16: return std::numeric_limits<uint16_t>::max();
    case TokenDtype::int8: return std::numeric_limits<int8_t>::max();
    case TokenDtype::int16: return std::numeric_limits<int16_t>::max();
    case TokenDtype::int32: return std::numeric_limits<int32_t>::max();
    default: return std::numeric_limits<int64_t>::max();
  }
}

std::filesystem::path idx_path(const std::filesystem::path& prefix) {
  std::filesystem::path path = prefix;
  path += ".idx";
  return path;
}

std::filesystem::path bin_path(const std::filesystem::path& prefix) {
  std::filesystem::path path = prefix;
  path += ".bin";
  return path;
}

}  // namespace plexus::data

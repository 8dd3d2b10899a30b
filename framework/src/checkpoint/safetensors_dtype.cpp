// The vocabulary shared by the safetensors writer and reader: the error type, dtype names and
// sizes, shapes in messages.
#include <array>
#include <bit>
#include <string>

#include "plexus/core/checkpoint/safetensors.hpp"

// Tensor bytes are copied to and from files unchanged; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace plexus {

struct CheckpointError::Parts {
  std::string file;
  std::string problem;
};

namespace {
std::string checkpoint_message(const std::filesystem::path& file, const std::string& problem) {
  return file.empty() ? problem : file.string() + ": " + problem;
}
}  // namespace

CheckpointError::CheckpointError(const std::filesystem::path& file, const std::string& problem)
    : std::runtime_error(checkpoint_message(file, problem)),
      parts_(std::make_shared<const Parts>(Parts{file.string(), problem})) {}

const std::string& CheckpointError::file() const noexcept { return parts_->file; }
const std::string& CheckpointError::problem() const noexcept { return parts_->problem; }

}  // namespace plexus

namespace plexus::checkpoint {

namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

// In the order of the enum, which is also the order of the format's documentation.
constexpr std::array<DTypeEntry, 15> kDTypes{{
    {DType::boolean, "BOOL", 1},
    {DType::u8, "U8", 1},
    {DType::i8, "I8", 1},
    {DType::f8_e5m2, "F8_E5M2", 1},
    {DType::f8_e4m3, "F8_E4M3", 1},
    {DType::i16, "I16", 2},
    {DType::u16, "U16", 2},
    {DType::f16, "F16", 2},
    {DType::bf16, "BF16", 2},
    {DType::i32, "I32", 4},
    {DType::u32, "U32", 4},
    {DType::f32, "F32", 4},
    {DType::i64, "I64", 8},
    {DType::u64, "U64", 8},
    {DType::f64, "F64", 8},
}};

constexpr bool table_matches_enum() {
  for (std::size_t i = 0; i < kDTypes.size(); ++i)
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  return true;
}
static_assert(table_matches_enum(), "kDTypes must list the DType enumerators in order");

const DTypeEntry& entry(DType dtype) noexcept {
  const auto i = static_cast<std::size_t>(dtype);
  return kDTypes[i < kDTypes.size() ? i : 0];
}

}  // namespace

std::string_view to_string(DType dtype) noexcept { return entry(dtype).name; }

std::size_t dtype_size(DType dtype) noexcept { return entry(dtype).size; }

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (const auto& e : kDTypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

std::string known_dtype_names() {
  std::string names;
  for (const auto& e : kDTypes) {
    if (!names.empty()) names += ", ";
    names += e.name;
  }
  return names;
}

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::optional<std::int64_t> element_count(std::span<const std::int64_t> shape) noexcept {
  std::int64_t count = 1;
  for (const std::int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count)) return std::nullopt;
  }
  return count;
}

}  // namespace plexus::checkpoint

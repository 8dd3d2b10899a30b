// Checksums and finite values of safetensors tensors (integrity.hpp).
#include "plexus/core/checkpoint/integrity.hpp"

#include <boost/json/parse.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "plexus/core/xxhash64.hpp"

namespace plexus::checkpoint {
namespace {

// A floating-point format by its bits: a value is not finite when all of exp_mask's bits are set;
// it is an infinity (rather than a NaN) when, in addition, none of mantissa_mask's are.
struct FloatBits {
  std::uint64_t exp_mask = 0;
  std::uint64_t mantissa_mask = 0;  // 0 for a format without infinities (F8_E4M3: all ones is NaN)
  std::uint64_t sign_mask = 0;
  std::size_t size = 0;
};

std::optional<FloatBits> float_bits(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return FloatBits{0x7FF0000000000000ULL, 0x000FFFFFFFFFFFFFULL, 0x8000000000000000ULL, 8};
    case DType::f32:
      return FloatBits{0x7F800000U, 0x007FFFFFU, 0x80000000U, 4};
    case DType::f16:
      return FloatBits{0x7C00U, 0x03FFU, 0x8000U, 2};
    case DType::bf16:
      return FloatBits{0x7F80U, 0x007FU, 0x8000U, 2};
    case DType::f8_e5m2:
      return FloatBits{0x7CU, 0x03U, 0x80U, 1};
    case DType::f8_e4m3:  // the "FN" variant safetensors means: no infinities, S.1111.111 is NaN
      return FloatBits{0x7FU, 0, 0x80U, 1};
    default:
      return std::nullopt;
  }
}

template <typename Word>
Word word_at(const std::byte* p) noexcept {
  Word w{};
  std::memcpy(&w, p, sizeof w);  // the bytes need not be aligned
  return w;
}

// The index of the first element whose exponent bits are all set, or count. Blocks are first
// tested with a branch-free loop the compiler vectorizes; only a block with a hit is searched.
template <typename Word>
std::size_t first_all_ones(const std::byte* data, std::size_t count, Word exp_mask) noexcept {
  constexpr std::size_t kBlock = 4096;
  for (std::size_t begin = 0; begin < count; begin += kBlock) {
    const std::size_t end = std::min(count, begin + kBlock);
    bool any = false;
    for (std::size_t i = begin; i < end; ++i)
      any |= (word_at<Word>(data + i * sizeof(Word)) & exp_mask) == exp_mask;
    if (!any) continue;
    for (std::size_t i = begin; i < end; ++i)
      if ((word_at<Word>(data + i * sizeof(Word)) & exp_mask) == exp_mask) return i;
  }
  return count;
}

std::uint64_t bits_at(const std::byte* p, std::size_t size) noexcept {
  switch (size) {
    case 8:
      return word_at<std::uint64_t>(p);
    case 4:
      return word_at<std::uint32_t>(p);
    case 2:
      return word_at<std::uint16_t>(p);
    default:
      return std::to_integer<std::uint64_t>(*p);
  }
}

// "[1, 3]": the index of element `flat` of a row-major tensor of this shape.
std::string index_text(std::size_t flat, std::span<const std::int64_t> shape) {
  std::vector<std::int64_t> index(shape.size(), 0);
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<std::size_t>(shape[d]);
    index[d] = static_cast<std::int64_t>(flat % extent);
    flat /= extent;
  }
  return shape_text(index);
}

}  // namespace

std::optional<std::map<std::string, std::uint64_t, std::less<>>> recorded_checksums(
    const SafetensorsFile& file) {
  const auto entry = file.metadata().find(kChecksumKey);
  if (entry == file.metadata().end()) return std::nullopt;
  const auto refuse = [&](const std::string& why) -> CheckpointError {
    return CheckpointError(file.path(), std::string("its \"__metadata__\" entry \"") + kChecksumKey +
                                            "\" is not a JSON object of tensor name -> 16 hex digits (" +
                                            why +
                                            "): the header was damaged or edited after the file was written");
  };
  boost::system::error_code ec;
  const boost::json::value parsed = boost::json::parse(entry->second, ec);
  if (ec) throw refuse("not JSON: " + ec.message());
  if (!parsed.is_object()) throw refuse("not an object");
  std::map<std::string, std::uint64_t, std::less<>> checksums;
  for (const auto& [name, value] : parsed.as_object()) {
    std::uint64_t sum = 0;
    if (!value.is_string() || !parse_hex64(value.as_string(), sum))
      throw refuse("the value for '" + std::string(name) + "' is not 16 hex digits");
    checksums.emplace(std::string(name), sum);
  }
  return checksums;
}

std::optional<std::string> first_non_finite(const TensorView& tensor) {
  const std::optional<FloatBits> format = float_bits(tensor.dtype);
  if (!format) return std::nullopt;
  const std::size_t count = tensor.bytes.size() / format->size;
  const std::byte* data = tensor.bytes.data();
  std::size_t at = count;
  switch (format->size) {
    case 8:
      at = first_all_ones<std::uint64_t>(data, count, format->exp_mask);
      break;
    case 4:
      at = first_all_ones<std::uint32_t>(data, count, static_cast<std::uint32_t>(format->exp_mask));
      break;
    case 2:
      at = first_all_ones<std::uint16_t>(data, count, static_cast<std::uint16_t>(format->exp_mask));
      break;
    default:
      at = first_all_ones<std::uint8_t>(data, count, static_cast<std::uint8_t>(format->exp_mask));
      break;
  }
  if (at == count) return std::nullopt;
  const std::uint64_t bits = bits_at(data + at * format->size, format->size);
  const bool infinite = format->mantissa_mask != 0 && (bits & format->mantissa_mask) == 0;
  const std::string value = !infinite ? "nan" : (bits & format->sign_mask) != 0 ? "-inf" : "inf";
  return "element " + std::to_string(at) + " (index " + index_text(at, tensor.shape) + ") is " + value;
}

FileCheck verify_file(const SafetensorsFile& file) {
  FileCheck check;
  check.file = file.path();
  const auto checksums = recorded_checksums(file);
  check.has_checksums = checksums.has_value();
  std::set<std::string_view> seen;
  for (const TensorView& tensor : file.tensors()) {
    ++check.tensors;
    std::string problem;
    if (checksums) {
      seen.insert(tensor.name);
      const auto recorded = checksums->find(tensor.name);
      if (recorded == checksums->end()) {
        problem = "no checksum is recorded for it: the header was changed after the file was written";
      } else if (const std::uint64_t now = xxh64(tensor.bytes); now != recorded->second) {
        problem = "its bytes do not match the checksum recorded when the file was written (XXH64 " +
                  hex64(recorded->second) + ", now " + hex64(now) +
                  "): the file was damaged after it was written";
      }
    }
    if (const auto bad = first_non_finite(tensor))
      problem += (problem.empty() ? "" : "; ") + *bad + ": a checkpoint holds finite values only";
    if (!problem.empty()) check.problems.push_back("tensor " + std::string(tensor.name) + ": " + problem);
  }
  if (checksums)
    for (const auto& [name, sum] : *checksums)
      if (!seen.contains(name))
        check.problems.push_back(
            "tensor " + name +
            ": a checksum is recorded for it, but the file has no such tensor: the header "
            "was changed after the file was written");
  return check;
}

}  // namespace plexus::checkpoint

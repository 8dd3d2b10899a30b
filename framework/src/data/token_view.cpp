// TokenView: tokens of any integer dtype, read as int64. The .bin is mapped at an arbitrary
// page offset and Megatron does not align sequences, so every read goes through memcpy.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>
#include <string>

#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {
namespace {

template <typename T>
T load_raw(const std::byte* data, std::size_t index) noexcept {
  T value;
  std::memcpy(&value, data + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
int64_t load(const std::byte* data, std::size_t index) noexcept {
  T value;
  std::memcpy(&value, data + index * sizeof(T), sizeof(T));
  return static_cast<int64_t>(value);
}

// The extremes of `count` values: a plain loop the compiler vectorizes (memcpy per element
// keeps the unaligned reads defined: Megatron does not align sequences).
template <typename T>
void extremes(const std::byte* data, std::size_t count, T& lo, T& hi) noexcept {
  T l = lo, h = hi;
  for (std::size_t i = 0; i < count; ++i) {
    const T v = load_raw<T>(data, i);
    l = std::min(l, v);
    h = std::max(h, v);
  }
  lo = l;
  hi = h;
}

// Threaded over large chunks, each the loop above.
template <typename T>
TokenView::IdRange range_of(const std::byte* data, std::size_t count) noexcept {
  TokenView::IdRange range;
  if (count == 0) return range;
  constexpr std::size_t kChunk = std::size_t{1} << 22;
  const auto chunks = static_cast<std::ptrdiff_t>((count + kChunk - 1) / kChunk);
  std::vector<std::pair<T, T>> found(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunk;
    const std::size_t n = std::min(kChunk, count - begin);
    T lo = load_raw<T>(data, begin), hi = lo;
    extremes<T>(data + begin * sizeof(T), n, lo, hi);
    found[static_cast<std::size_t>(c)] = {lo, hi};
  }
  T lo = found.front().first, hi = found.front().second;
  for (const auto& [l, h] : found) {
    lo = l < lo ? l : lo;
    hi = h > hi ? h : hi;
  }
  range.min = static_cast<int64_t>(lo);
  range.max = static_cast<int64_t>(hi);
  return range;
}

template <typename T>
void convert(const std::byte* data, std::size_t count, int64_t* out) noexcept {
  for (std::size_t i = 0; i < count; ++i) out[i] = load<T>(data, i);
}

}  // namespace

int64_t TokenView::operator[](std::size_t index) const noexcept {
  switch (dtype_) {
    case TokenDtype::uint8: return load<uint8_t>(data_, index);
    case TokenDtype::int8: return load<int8_t>(data_, index);
    case TokenDtype::int16: return load<int16_t>(data_, index);
    case TokenDtype::uint16: return load<uint16_t>(data_, index);
    case TokenDtype::int32: return load<int32_t>(data_, index);
    case TokenDtype::int64: return load<int64_t>(data_, index);
    default: return 0;  // float dtypes never reach a view: IndexedDataset refuses them
  }
}

int64_t TokenView::at(std::size_t index) const {
  if (index >= count_)
    throw std::out_of_range("token " + std::to_string(index) + " of a view of " + std::to_string(count_) + " tokens");
  return (*this)[index];
}

TokenView TokenView::subview(std::size_t offset, std::size_t count) const {
  if (offset > count_ || count > count_ - offset)
    throw std::out_of_range("tokens [" + std::to_string(offset) + ", +" + std::to_string(count) + ") of a view of " +
                            std::to_string(count_) + " tokens");
  return {data_ == nullptr ? nullptr : data_ + offset * dtype_size(dtype_), count, dtype_};
}

void TokenView::copy_to(std::size_t offset, std::span<int64_t> out) const {
  const TokenView part = subview(offset, out.size());
  if (part.empty()) return;
  switch (dtype_) {
    case TokenDtype::uint8: convert<uint8_t>(part.data_, part.count_, out.data()); break;
    case TokenDtype::int8: convert<int8_t>(part.data_, part.count_, out.data()); break;
    case TokenDtype::int16: convert<int16_t>(part.data_, part.count_, out.data()); break;
    case TokenDtype::uint16: convert<uint16_t>(part.data_, part.count_, out.data()); break;
    case TokenDtype::int32: convert<int32_t>(part.data_, part.count_, out.data()); break;
    case TokenDtype::int64: std::memcpy(out.data(), part.data_, part.count_ * sizeof(int64_t)); break;
    default: break;
  }
}

TokenView::IdRange TokenView::id_range() const noexcept {
  switch (dtype_) {
    case TokenDtype::uint8: return range_of<uint8_t>(data_, count_);
    case TokenDtype::int8: return range_of<int8_t>(data_, count_);
    case TokenDtype::int16: return range_of<int16_t>(data_, count_);
    case TokenDtype::uint16: return range_of<uint16_t>(data_, count_);
    case TokenDtype::int32: return range_of<int32_t>(data_, count_);
    case TokenDtype::int64: return range_of<int64_t>(data_, count_);
    default: return {};
  }
}

std::vector<int64_t> TokenView::to_vector() const {
  std::vector<int64_t> out(count_);
  copy_to(0, out);
  return out;
}

}  // namespace plexus::data

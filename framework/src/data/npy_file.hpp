// NumPy's .npy format (version 1.0) for the dataset index caches: one little-endian integer
// array, 1-D or [rows, 2], written atomically and read back through a memory map, so numpy.load
// opens Plexus's cache files and a cached index of many samples costs no copy.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {

// The dtypes the caches use, by numpy's descr.
template <class T>
constexpr const char* npy_descr();
template <>
constexpr const char* npy_descr<int16_t>() {
  return "<i2";
}
template <>
constexpr const char* npy_descr<int32_t>() {
  return "<i4";
}
template <>
constexpr const char* npy_descr<int64_t>() {
  return "<i8";
}
template <>
constexpr const char* npy_descr<float>() {
  return "<f4";
}

// Writes values as an array of `columns` columns (1: 1-D) into `file` atomically.
void write_npy(const std::filesystem::path& file, const char* descr, std::size_t element_size,
               std::span<const std::byte> values, std::size_t columns);

template <class T>
void write_npy(const std::filesystem::path& file, std::span<const T> values, std::size_t columns = 1) {
  write_npy(file, npy_descr<T>(), sizeof(T), std::as_bytes(values), columns);
}

// A mapped .npy array of T; nullopt when the file is absent, is not a C-order array of T with
// `columns` columns (1: 1-D), or is cut short: a cache that does not fit is rebuilt, never read.
template <class T>
class MappedNpy {
 public:
  static std::optional<MappedNpy> open(const std::filesystem::path& file, std::size_t columns = 1);
  std::span<const T> values() const noexcept { return values_; }

 private:
  MappedFile file_;
  std::span<const T> values_;
};

// The data offset and element count of a mapped .npy of descr with `columns` columns, if it is one.
std::optional<std::pair<std::size_t, std::size_t>> npy_layout(std::span<const std::byte> bytes,
                                                              const char* descr, std::size_t element_size,
                                                              std::size_t columns);

template <class T>
std::optional<MappedNpy<T>> MappedNpy<T>::open(const std::filesystem::path& file, std::size_t columns) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
  MappedNpy out;
  out.file_ = MappedFile(file);
  const auto layout = npy_layout(out.file_.bytes(), npy_descr<T>(), sizeof(T), columns);
  if (!layout) return std::nullopt;
  out.values_ = {reinterpret_cast<const T*>(out.file_.bytes().data() + layout->first), layout->second};
  return out;
}

}  // namespace plexus::data

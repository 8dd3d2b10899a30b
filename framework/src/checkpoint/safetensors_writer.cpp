// Writing safetensors files: the header is built with Boost.JSON, the tensor bytes are streamed
// from the caller's memory without copies.
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <array>
#include <stdexcept>

#include "plexus/core/checkpoint/atomic_file.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"

namespace plexus::checkpoint {

namespace {

std::uint64_t byte_size(const TensorData& t) {
  // add() has checked that the count fits and, without a fill, matches the span.
  if (!t.fill) return t.bytes.size();
  return static_cast<std::uint64_t>(*element_count(t.shape)) * dtype_size(t.dtype);
}

std::span<const std::byte> as_bytes(std::string_view text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

}  // namespace

void SafetensorsWriter::add(TensorData tensor) {
  const auto fail = [&](const std::string& problem) {
    throw std::invalid_argument("safetensors tensor '" + tensor.name + "': " + problem);
  };
  if (tensor.name.empty()) throw std::invalid_argument("safetensors tensor: the name is empty");
  if (tensor.name == "__metadata__") fail("the name is reserved for the file's metadata");
  if (names_.contains(tensor.name)) fail("added twice");
  const auto count = element_count(tensor.shape);
  if (!count) fail("shape " + shape_text(tensor.shape) + " has a negative dimension or too many elements");
  const auto elem = static_cast<std::uint64_t>(dtype_size(tensor.dtype));
  std::uint64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(*count), elem, &expected))
    fail("shape " + shape_text(tensor.shape) + " is too large");
  if (tensor.fill && !tensor.bytes.empty()) fail("has both bytes and a fill");
  if (!tensor.fill && tensor.bytes.size() != expected)
    fail("shape " + shape_text(tensor.shape) + " of " + std::string(to_string(tensor.dtype)) + " needs " +
         std::to_string(expected) + " bytes, given " + std::to_string(tensor.bytes.size()));
  names_.insert(tensor.name);
  tensors_.push_back(std::move(tensor));
}

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<std::int64_t> shape,
                            std::span<const std::byte> bytes) {
  add(TensorData{std::move(name), dtype, std::move(shape), bytes});
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::vector<const TensorData*> SafetensorsWriter::storage_order() const {
  std::vector<const TensorData*> order;
  order.reserve(tensors_.size());
  for (const auto& t : tensors_) order.push_back(&t);
  // Largest elements first: every offset is then a multiple of the element size, since each
  // tensor before it has a byte size that is a multiple of a larger power of two.
  std::sort(order.begin(), order.end(), [](const TensorData* a, const TensorData* b) {
    const std::size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  return order;
}

std::string SafetensorsWriter::header() const {
  boost::json::object root;
  if (!metadata_.empty()) {
    boost::json::object meta;
    for (const auto& [key, value] : metadata_) meta[key] = value;
    root["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  for (const TensorData* t : storage_order()) {
    boost::json::array shape;
    for (const std::int64_t dim : t->shape) shape.emplace_back(dim);
    const std::uint64_t end = offset + byte_size(*t);
    boost::json::object entry;
    entry["dtype"] = to_string(t->dtype);
    entry["shape"] = std::move(shape);
    entry["data_offsets"] = boost::json::array{offset, end};
    root[t->name] = std::move(entry);
    offset = end;
  }
  std::string text = boost::json::serialize(root);
  // Spaces after the JSON (allowed by the format) make the data buffer start 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::uint64_t SafetensorsWriter::file_size() const {
  std::uint64_t size = 8 + header().size();
  for (const auto& t : tensors_) size += byte_size(t);
  return size;
}

void SafetensorsWriter::write_to(const std::function<void(std::span<const std::byte>)>& sink) const {
  const std::string text = header();
  std::array<std::byte, 8> length{};
  auto n = static_cast<std::uint64_t>(text.size());
  for (auto& b : length) {  // little-endian whatever the host
    b = static_cast<std::byte>(n & 0xFFU);
    n >>= 8U;
  }
  sink(length);
  sink(as_bytes(text));
  std::vector<std::byte> filled;
  for (const TensorData* t : storage_order()) {
    if (t->fill) {
      filled.assign(byte_size(*t), std::byte{0});
      t->fill(filled);
      sink(filled);
    } else if (!t->bytes.empty()) {
      sink(t->bytes);
    }
  }
}

std::vector<std::byte> SafetensorsWriter::to_bytes() const {
  std::vector<std::byte> out;
  out.reserve(file_size());
  write_to([&](std::span<const std::byte> bytes) { out.insert(out.end(), bytes.begin(), bytes.end()); });
  return out;
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  write_file_atomically(path, [this](FileSink& file) {
    write_to([&](std::span<const std::byte> bytes) { file.write(bytes); });
  });
}

}  // namespace plexus::checkpoint

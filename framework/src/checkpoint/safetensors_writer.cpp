// Writing safetensors files: the header is built with Boost.JSON, the tensor bytes are streamed
// from the caller's memory without copies, each hashed (XXH64) on its way; the header, written
// first with placeholder checksums, is rewritten in place with the real ones at the end.
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <array>
#include <future>
#include <stdexcept>
#include <system_error>

#include "plexus/core/checkpoint/atomic_file.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/xxhash64.hpp"

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

// From this size on, a tensor is hashed on a thread of its own while it is written: XXH64 takes
// about 0.5 ms for 4 MB, against some 50 us to start a thread.
constexpr std::size_t kOverlapBytes = std::size_t{1} << 22;

// The file's first 8 bytes: the header length, little-endian whatever the host.
std::array<std::byte, 8> length_prefix(std::size_t header_size) {
  std::array<std::byte, 8> length{};
  auto n = static_cast<std::uint64_t>(header_size);
  for (auto& b : length) {
    b = static_cast<std::byte>(n & 0xFFU);
    n >>= 8U;
  }
  return length;
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

std::string SafetensorsWriter::header_with(
    const std::map<std::string, std::uint64_t, std::less<>>& checksums) const {
  boost::json::object root;
  const std::vector<const TensorData*> order = storage_order();
  boost::json::object meta;
  for (const auto& [key, value] : metadata_)
    if (key != kChecksumKey) meta[key] = value;
  if (!order.empty()) {
    // Every entry is 16 hex digits, placeholder or not, so the header's size never depends on
    // whether the checksums are known yet.
    boost::json::object sums;
    for (const TensorData* t : order) {
      const auto found = checksums.find(t->name);
      sums[t->name] = found != checksums.end() ? hex64(found->second) : std::string(16, '0');
    }
    meta[kChecksumKey] = boost::json::serialize(sums);
  }
  if (!meta.empty()) root["__metadata__"] = std::move(meta);
  std::uint64_t offset = 0;
  for (const TensorData* t : order) {
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

std::string SafetensorsWriter::header() const {
  return header_with({});
}

std::uint64_t SafetensorsWriter::file_size() const {
  std::uint64_t size = 8 + header().size();
  for (const auto& t : tensors_) size += byte_size(t);
  return size;
}

void SafetensorsWriter::write_to(const Sink& sink, const Rewrite& rewrite) const {
  const std::string placeholder = header();
  sink(length_prefix(placeholder.size()));
  sink(as_bytes(placeholder));
  std::map<std::string, std::uint64_t, std::less<>> checksums;
  std::vector<std::byte> filled;
  for (const TensorData* t : storage_order()) {
    std::span<const std::byte> bytes = t->bytes;
    if (t->fill) {
      filled.assign(byte_size(*t), std::byte{0});
      t->fill(filled);
      bytes = filled;
    }
    // A large tensor is hashed on another thread while the sink writes it (both only read the
    // bytes), so the checksum adds next to nothing to the write's time on a machine with a core to
    // spare; a small one inline, where starting a thread would cost more than the hash.
    std::future<std::uint64_t> hashed;
    if (bytes.size() >= kOverlapBytes) {
      try {
        hashed = std::async(std::launch::async, [bytes] { return xxh64(bytes); });
      } catch (const std::system_error&) {  // no thread to be had: hash inline below
      }
    }
    if (hashed.valid()) {
      sink(bytes);
      checksums[t->name] = hashed.get();
    } else {
      checksums[t->name] = xxh64(bytes);
      if (!bytes.empty()) sink(bytes);
    }
  }
  if (checksums.empty()) return;  // no tensor, no checksum entry: the header is final
  const std::string final_header = header_with(checksums);
  if (final_header.size() != placeholder.size())  // cannot happen: every entry has 16 digits
    throw std::logic_error("safetensors writer: the header changed size when its checksums were filled in");
  rewrite(8, as_bytes(final_header));
}

void SafetensorsWriter::write_to(const Sink& sink) const {
  const std::vector<const TensorData*> order = storage_order();
  std::vector<std::vector<std::byte>> filled(order.size());
  std::map<std::string, std::uint64_t, std::less<>> checksums;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const TensorData* t = order[i];
    if (t->fill) {
      filled[i].assign(byte_size(*t), std::byte{0});
      t->fill(filled[i]);
    }
    checksums[t->name] = xxh64(t->fill ? std::span<const std::byte>(filled[i]) : t->bytes);
  }
  const std::string text = header_with(checksums);
  sink(length_prefix(text.size()));
  sink(as_bytes(text));
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::span<const std::byte> bytes =
        order[i]->fill ? std::span<const std::byte>(filled[i]) : order[i]->bytes;
    if (!bytes.empty()) sink(bytes);
  }
}

std::vector<std::byte> SafetensorsWriter::to_bytes() const {
  std::vector<std::byte> out;
  out.reserve(file_size());
  write_to([&](std::span<const std::byte> bytes) { out.insert(out.end(), bytes.begin(), bytes.end()); },
           [&](std::uint64_t offset, std::span<const std::byte> bytes) {
             std::copy(bytes.begin(), bytes.end(), out.begin() + static_cast<std::ptrdiff_t>(offset));
           });
  return out;
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  write_file_atomically(path, [this](FileSink& file) {
    write_to([&](std::span<const std::byte> bytes) { file.write(bytes); },
             [&](std::uint64_t offset, std::span<const std::byte> bytes) { file.write_at(offset, bytes); });
  });
}

}  // namespace plexus::checkpoint

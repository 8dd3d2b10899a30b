// .npy version 1.0: the 6-byte magic, the version, a little-endian uint16 header length, and a
// Python dict literal padded with spaces to a 64-byte boundary and ended by '\n'.
#include "data/npy_file.hpp"

#include <cstring>
#include <string_view>

#include "plexus/core/checkpoint/atomic_file.hpp"

namespace plexus::data {
namespace {

constexpr std::string_view kMagic("\x93NUMPY\x01\x00", 8);

std::string header_text(const char* descr, std::size_t rows, std::size_t columns) {
  // Built by appends: GCC 12 warns falsely (-Wrestrict) on a chain of string + char*.
  std::string dict = "{'descr': '";
  dict.append(descr).append("', 'fortran_order': False, 'shape': (").append(std::to_string(rows));
  if (columns == 1)
    dict.append(",), }");
  else
    dict.append(", ").append(std::to_string(columns)).append("), }");
  const std::size_t unpadded = kMagic.size() + 2 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  return dict;
}

}  // namespace

void write_npy(const std::filesystem::path& file, const char* descr, std::size_t element_size,
               std::span<const std::byte> values, std::size_t columns) {
  const std::size_t rows = values.size() / element_size / columns;
  const std::string header = header_text(descr, rows, columns);
  checkpoint::write_file_atomically(file, [&](checkpoint::FileSink& sink) {
    sink.write(kMagic);
    const char length[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
    sink.write(std::string_view(length, 2));
    sink.write(header);
    sink.write(values);
  });
}

std::optional<std::pair<std::size_t, std::size_t>> npy_layout(std::span<const std::byte> bytes,
                                                              const char* descr, std::size_t element_size,
                                                              std::size_t columns) {
  if (bytes.size() < kMagic.size() + 2 || std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0)
    return std::nullopt;
  const auto length = static_cast<std::size_t>(std::to_integer<uint8_t>(bytes[8])) |
                      static_cast<std::size_t>(std::to_integer<uint8_t>(bytes[9])) << 8;
  const std::size_t offset = kMagic.size() + 2 + length;
  if (bytes.size() < offset) return std::nullopt;
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + kMagic.size() + 2, length);
  // Only the header write_npy writes is read: the rows are the one number it leaves open.
  const std::size_t open = header.find("'shape': (");
  if (open == std::string_view::npos) return std::nullopt;
  std::size_t rows = 0, at = open + 10;
  if (at >= header.size() || header[at] < '0' || header[at] > '9') return std::nullopt;
  for (; at < header.size() && header[at] >= '0' && header[at] <= '9'; ++at)
    rows = rows * 10 + (header[at] - '0');
  if (header != header_text(descr, rows, columns)) return std::nullopt;
  const std::size_t count = rows * columns;
  if (bytes.size() != offset + count * element_size) return std::nullopt;
  return std::make_pair(offset, count);
}

}  // namespace plexus::data

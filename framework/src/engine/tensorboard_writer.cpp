#include "engine/tensorboard_writer.hpp"

#include <unistd.h>

#include <array>
#include <bit>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace plexus {

// The wire formats are little-endian; the writer copies integers and floats as they lie.
static_assert(std::endian::native == std::endian::little, "TensorBoardWriter assumes a little-endian host");

namespace tensorboard_detail {

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1u) != 0 ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (const char ch : data) crc = table[(crc ^ static_cast<uint8_t>(ch)) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

}  // namespace tensorboard_detail

namespace {

// Protocol buffer wire format, the field kinds Event and Summary use.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, uint32_t field, uint32_t wire_type) {
  varint(out, (uint64_t{field} << 3) | wire_type);
}
void bytes_field(std::string& out, uint32_t field, std::string_view value) {
  key(out, field, 2);
  varint(out, value.size());
  out.append(value);
}
template <class T>
void fixed_field(std::string& out, uint32_t field, T value) {  // double (wire type 1) or float (5)
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  key(out, field, sizeof(T) == 8 ? 1 : 5);
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // little-endian, as the wire format
  out.append(raw, sizeof(T));
}

// TensorBoard decodes text as UTF-8: a byte sequence that is not (a sample from a byte-level model
// may end mid-character) becomes U+FFFD, byte by byte, the rest as it is.
std::string valid_utf8(std::string_view text) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t length = c < 0x80           ? 1
                               : (c >> 5) == 0x6  ? 2
                               : (c >> 4) == 0xE  ? 3
                               : (c >> 3) == 0x1E ? 4
                                                  : 0;
    bool ok = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; ok && k < length; ++k) ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (ok) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

// Summary { repeated Value value = 1; }, Value { string tag = 1; float simple_value = 2;
// TensorProto tensor = 8; SummaryMetadata metadata = 9; }.
std::string scalar_summary(std::string_view tag, float value) {
  std::string v;
  bytes_field(v, 1, tag);
  fixed_field(v, 2, value);
  std::string summary;
  bytes_field(summary, 1, v);
  return summary;
}

// The text plugin's value: metadata.plugin_data.plugin_name = "text", a scalar string tensor
// (TensorProto { DataType dtype = 1 (DT_STRING = 7); bytes string_val = 8; }).
std::string text_summary(std::string_view tag, std::string_view text) {
  std::string tensor;
  key(tensor, 1, 0);
  varint(tensor, 7);
  bytes_field(tensor, 8, valid_utf8(text));
  std::string plugin_data;
  bytes_field(plugin_data, 1, "text");
  std::string metadata;
  bytes_field(metadata, 1, plugin_data);
  std::string v;
  bytes_field(v, 1, tag);
  bytes_field(v, 8, tensor);
  bytes_field(v, 9, metadata);
  std::string summary;
  bytes_field(summary, 1, v);
  return summary;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("train.tensorboard_dir: cannot create " + dir.string() + ": " + ec.message());
  file_ = dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." +
                 host_name() + "." + std::to_string(getpid()) + ".plexus");
  out_.open(file_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("train.tensorboard_dir: cannot write " + file_.string());
  // The first event names the format: Event { double wall_time = 1; string file_version = 3; }.
  std::string event;
  fixed_field(event, 1, now_seconds());
  bytes_field(event, 3, "brain.Event:2");
  write_record_bytes(event);
}

void TensorBoardWriter::write_record(const boost::json::object& record) {
  const boost::json::value* step = record.if_contains("step");
  if (step == nullptr || !step->is_int64()) return;
  const int64_t at = step->as_int64();
  for (const auto& [name, value] : record) {
    if (name == "step") continue;
    if (value.is_number()) {
      scalar(name, at, value.to_number<double>());
    } else if (value.is_array()) {
      const boost::json::array& values = value.as_array();
      for (std::size_t i = 0; i < values.size(); ++i)
        if (values[i].is_number())
          scalar(std::string(name) + "/" + std::to_string(i), at, values[i].to_number<double>());
    }
  }
}

void TensorBoardWriter::scalar(std::string_view tag, int64_t step, double value) {
  write_event(step, scalar_summary(tag, static_cast<float>(value)));
}

void TensorBoardWriter::text(std::string_view tag, int64_t step, std::string_view text) {
  write_event(step, text_summary(tag, text));
}

// Event { double wall_time = 1; int64 step = 2; Summary summary = 5; }
void TensorBoardWriter::write_event(int64_t step, std::string_view summary) {
  std::string event;
  fixed_field(event, 1, now_seconds());
  key(event, 2, 0);
  varint(event, static_cast<uint64_t>(step));
  bytes_field(event, 5, summary);
  write_record_bytes(event);
}

// TFRecord: uint64 length, uint32 masked CRC-32C of the length's bytes, the data, uint32 masked
// CRC-32C of the data; all little-endian.
void TensorBoardWriter::write_record_bytes(std::string_view data) {
  const uint64_t length = data.size();
  char header[12];
  std::memcpy(header, &length, 8);
  const uint32_t length_crc = tensorboard_detail::masked_crc32c(std::string_view(header, 8));
  std::memcpy(header + 8, &length_crc, 4);
  const uint32_t data_crc = tensorboard_detail::masked_crc32c(data);
  char footer[4];
  std::memcpy(footer, &data_crc, 4);
  out_.write(header, sizeof header);
  out_.write(data.data(), static_cast<std::streamsize>(data.size()));
  out_.write(footer, sizeof footer);
  out_.flush();
  if (!out_) throw std::runtime_error(file_.string() + ": cannot write a TensorBoard event (disk full?)");
}

}  // namespace plexus

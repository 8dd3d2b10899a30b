// Validating a safetensors header against the format, strictly: a file that passes has a
// known dtype, a consistent shape and its own bytes for every tensor, and no unexplained bytes.
// Each violation is reported with the tensor, the values found and what the format requires.
#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/safetensors.hpp"

namespace plexus::checkpoint {

namespace {

using boost::system::error_code;

// A name from the file, quoted for a message: control characters escaped and long names cut,
// so a corrupt header cannot produce an unreadable message.
std::string quote_name(std::string_view name) {
  constexpr std::size_t kMax = 200;
  std::string out = "'";
  for (std::size_t i = 0; i < name.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > kMax) out += "...";
  return out + "'";
}

// A boost::json::basic_parser handler that builds nothing and stops at the first key repeated
// within one object: JSON parsers keep the last value silently, and a file naming a tensor twice
// is ambiguous. It also locates syntax errors (write_some returns where it stopped).
class DuplicateKeyFinder {
 public:
  static constexpr std::size_t max_object_size = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t max_array_size = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t max_key_size = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t max_string_size = std::numeric_limits<std::size_t>::max();

  static bool on_document_begin(error_code& /*ec*/) { return true; }
  static bool on_document_end(error_code& /*ec*/) { return true; }
  bool on_array_begin(error_code& /*ec*/) {
    frames_.emplace_back();
    return true;
  }
  bool on_array_end(std::size_t /*n*/, error_code& /*ec*/) {
    frames_.pop_back();
    return true;
  }
  bool on_object_begin(error_code& /*ec*/) {
    frames_.emplace_back();
    return true;
  }
  bool on_object_end(std::size_t /*n*/, error_code& /*ec*/) {
    frames_.pop_back();
    return true;
  }
  static bool on_string_part(boost::json::string_view /*s*/, std::size_t /*n*/, error_code& /*ec*/) { return true; }
  static bool on_string(boost::json::string_view /*s*/, std::size_t /*n*/, error_code& /*ec*/) { return true; }
  bool on_key_part(boost::json::string_view s, std::size_t /*n*/, error_code& /*ec*/) {
    key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(boost::json::string_view s, std::size_t /*n*/, error_code& ec) {
    key_.append(s.data(), s.size());
    if (frames_.size() == 1) top_key_ = key_;
    if (!frames_.back().insert(key_).second) {
      duplicate_ = key_;
      ec = boost::json::error::syntax;  // any error stops the parser
      return false;
    }
    key_.clear();
    return true;
  }
  static bool on_number_part(boost::json::string_view /*s*/, error_code& /*ec*/) { return true; }
  static bool on_int64(std::int64_t /*i*/, boost::json::string_view /*s*/, error_code& /*ec*/) { return true; }
  static bool on_uint64(std::uint64_t /*u*/, boost::json::string_view /*s*/, error_code& /*ec*/) { return true; }
  static bool on_double(double /*d*/, boost::json::string_view /*s*/, error_code& /*ec*/) { return true; }
  static bool on_bool(bool /*b*/, error_code& /*ec*/) { return true; }
  static bool on_null(error_code& /*ec*/) { return true; }
  static bool on_comment_part(boost::json::string_view /*s*/, error_code& /*ec*/) { return true; }
  static bool on_comment(boost::json::string_view /*s*/, error_code& /*ec*/) { return true; }

  // The repeated key, and the top-level key it was found in (itself when at the top level).
  [[nodiscard]] const std::optional<std::string>& duplicate() const { return duplicate_; }
  [[nodiscard]] bool duplicate_at_top() const { return frames_.size() == 1; }
  [[nodiscard]] const std::string& top_key() const { return top_key_; }

 private:
  std::vector<std::set<std::string>> frames_;  // keys seen per open object (arrays: unused)
  std::string key_;
  std::string top_key_;
  std::optional<std::string> duplicate_;
};

// Parses the header text as strict JSON (no comments, no trailing commas) without repeated keys.
boost::json::value parse_header_json(std::string_view text, const std::filesystem::path& origin) {
  boost::json::basic_parser<DuplicateKeyFinder> finder(boost::json::parse_options{});
  error_code ec;
  const std::size_t stop = finder.write_some(false, text.data(), text.size(), ec);
  const auto& handler = finder.handler();
  if (handler.duplicate()) {
    if (handler.duplicate_at_top())
      throw CheckpointError(origin, "header names tensor " + quote_name(*handler.duplicate()) + " twice");
    throw CheckpointError(origin, "header entry " + quote_name(handler.top_key()) + " has the key " +
                                      quote_name(*handler.duplicate()) + " twice");
  }
  if (!ec && stop < text.size()) ec = boost::json::error::extra_data;  // write_some stops after the value
  if (ec)
    throw CheckpointError(origin, "header is not valid JSON: " + ec.message() + " at byte " + std::to_string(stop) +
                                      " of the header (file offset " + std::to_string(8 + stop) + ")");
  return boost::json::parse(text);  // cannot fail: the same text just parsed
}

const char* kind_name(const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::null: return "null";
    case boost::json::kind::bool_: return "a boolean";
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::double_: return "a number";
    case boost::json::kind::string: return "a string";
    case boost::json::kind::array: return "an array";
    case boost::json::kind::object: return "an object";
  }
  return "a value";
}

// A JSON integer >= 0 (written without fraction or exponent).
std::optional<std::uint64_t> non_negative(const boost::json::value& v) {
  if (v.is_uint64()) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
  return std::nullopt;
}

std::map<std::string, std::string> parse_metadata(const boost::json::value& v, const std::filesystem::path& origin) {
  if (!v.is_object())
    throw CheckpointError(origin, std::string("\"__metadata__\" must be an object of strings, found ") + kind_name(v));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : v.get_object()) {
    if (!value.is_string())
      throw CheckpointError(origin, "\"__metadata__\" value of " + quote_name(key) + " must be a string, found " +
                                        kind_name(value));
    metadata.emplace(std::string(key), std::string(value.get_string()));
  }
  return metadata;
}

// One tensor entry, checked on its own (offsets are checked against each other later).
TensorInfo parse_entry(std::string_view name, const boost::json::value& v, std::uint64_t data_size,
                       const std::filesystem::path& origin) {
  const auto fail = [&](const std::string& problem) {
    throw CheckpointError(origin, "tensor " + quote_name(name) + ": " + problem);
  };
  if (!v.is_object()) fail(std::string("entry must be an object, found ") + kind_name(v));
  const auto& entry = v.get_object();
  std::string missing;
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field)) missing += std::string(missing.empty() ? "" : ", ") + "\"" + field + "\"";
  if (!missing.empty()) fail("entry is missing " + missing);

  TensorInfo info;
  info.name = std::string(name);
  const auto& dtype = entry.at("dtype");
  if (!dtype.is_string()) fail(std::string("\"dtype\" must be a string, found ") + kind_name(dtype));
  const auto parsed = parse_dtype(std::string_view(dtype.get_string()));
  if (!parsed)
    fail("unknown dtype " + quote_name(std::string_view(dtype.get_string())) + " (known: " + known_dtype_names() + ")");
  info.dtype = *parsed;

  const auto& shape = entry.at("shape");
  const char* shape_rule = "\"shape\" must be an array of integers >= 0";
  if (!shape.is_array()) fail(std::string(shape_rule) + ", found " + kind_name(shape));
  for (const auto& dim : shape.get_array()) {
    const auto d = non_negative(dim);
    if (!d || *d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(std::string(shape_rule) + ", found " + boost::json::serialize(shape));
    info.shape.push_back(static_cast<std::int64_t>(*d));
  }

  const auto& offsets = entry.at("data_offsets");
  const char* offsets_rule = "\"data_offsets\" must be [begin, end] with integers 0 <= begin <= end";
  if (!offsets.is_array() || offsets.get_array().size() != 2)
    fail(std::string(offsets_rule) + ", found " + boost::json::serialize(offsets));
  const auto begin = non_negative(offsets.get_array()[0]);
  const auto end = non_negative(offsets.get_array()[1]);
  if (!begin || !end || *begin > *end) fail(std::string(offsets_rule) + ", found " + boost::json::serialize(offsets));
  info.begin = *begin;
  info.end = *end;

  const std::string offsets_text = "[" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "]";
  const auto count = element_count(info.shape);
  std::uint64_t needed = 0;
  if (!count || __builtin_mul_overflow(static_cast<std::uint64_t>(*count), dtype_size(info.dtype), &needed))
    fail("shape " + shape_text(info.shape) + " is too large");
  if (needed != info.end - info.begin)
    fail("shape " + shape_text(info.shape) + " of " + std::string(to_string(info.dtype)) + " needs " +
         std::to_string(needed) + " bytes but data_offsets " + offsets_text + " span " +
         std::to_string(info.end - info.begin));
  if (info.end > data_size)
    fail("data_offsets " + offsets_text + " end past the data buffer (" + std::to_string(data_size) +
         " bytes): the file is truncated or the offsets are wrong");
  return info;
}

// The tensors must tile the data buffer: sorted by offset, each starts where the previous ends
// and the last ends at the end of the file.
void check_coverage(const std::vector<TensorInfo>& tensors, std::uint64_t data_size,
                    const std::filesystem::path& origin) {
  std::uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& t : tensors) {
    const std::string range = " [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
    if (t.begin < expected)
      throw CheckpointError(origin, "tensors " + quote_name(previous->name) + " [" + std::to_string(previous->begin) +
                                        ", " + std::to_string(previous->end) + ") and " + quote_name(t.name) + range +
                                        " overlap in the data buffer");
    if (t.begin > expected)
      throw CheckpointError(origin, "bytes [" + std::to_string(expected) + ", " + std::to_string(t.begin) +
                                        ") of the data buffer belong to no tensor (" +
                                        (previous ? "between " + quote_name(previous->name) + " and " : "before ") +
                                        quote_name(t.name) + ")");
    expected = t.end;
    previous = &t;
  }
  if (expected != data_size)
    throw CheckpointError(origin, "bytes [" + std::to_string(expected) + ", " + std::to_string(data_size) +
                                      ") of the data buffer belong to no tensor (" +
                                      (previous ? "after " + quote_name(previous->name) : "the header lists no tensors") +
                                      ")");
}

}  // namespace

SafetensorsLayout parse_layout(std::span<const std::byte> file, const std::filesystem::path& origin) {
  if (file.size() < 8)
    throw CheckpointError(origin, "file is " + std::to_string(file.size()) +
                                      " bytes, too short for the 8-byte header length: truncated or not a "
                                      "safetensors file");
  std::uint64_t n = 0;
  for (std::size_t i = 8; i-- > 0;) n = (n << 8U) | std::to_integer<std::uint64_t>(file[i]);
  const std::uint64_t rest = file.size() - 8;
  if (n > rest)
    throw CheckpointError(origin, "header length " + std::to_string(n) + " is larger than the rest of the file (" +
                                      std::to_string(rest) + " bytes): truncated or not a safetensors file");
  if (n == 0) throw CheckpointError(origin, "header length is 0: not a safetensors file");

  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, static_cast<std::size_t>(n));
  const boost::json::value header = parse_header_json(text, origin);
  if (!header.is_object())
    throw CheckpointError(origin, std::string("header is not a JSON object (found ") + kind_name(header) + ")");
  if (text.front() != '{')
    throw CheckpointError(origin, "header starts with whitespace; the format requires '{' as its first byte");

  SafetensorsLayout layout;
  layout.header_size = n;
  const std::uint64_t data_size = rest - n;
  for (const auto& [key, value] : header.get_object()) {
    if (key == "__metadata__")
      layout.metadata = parse_metadata(value, origin);
    else
      layout.tensors.push_back(parse_entry(std::string_view(key), value, data_size, origin));
  }
  std::sort(layout.tensors.begin(), layout.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_coverage(layout.tensors, data_size, origin);
  return layout;
}

}  // namespace plexus::checkpoint

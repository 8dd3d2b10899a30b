// The byte <-> character table of byte-level BPE.
#include "data/byte_level.hpp"

#include "data/unicode.hpp"

namespace plexus::data::byte_level {
namespace {

bool stands_for_itself(unsigned byte) noexcept {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

struct Table {
  std::array<char32_t, 256> chars{};
  Table() {
    char32_t next = 256;
    for (unsigned byte = 0; byte < 256; ++byte) chars[byte] = stands_for_itself(byte) ? byte : next++;
  }
};

const Table& table() noexcept {
  static const Table t;
  return t;
}

}  // namespace

char32_t char_of(unsigned char byte) noexcept {
  return table().chars[byte];
}

std::optional<unsigned char> byte_of(char32_t code_point) noexcept {
  if (code_point < 256) {
    if (stands_for_itself(code_point)) return static_cast<unsigned char>(code_point);
    return std::nullopt;
  }
  if (code_point >= 256 + 68) return std::nullopt;
  // The n-th byte that does not stand for itself.
  unsigned n = code_point - 256;
  for (unsigned byte = 0; byte < 256; ++byte)
    if (!stands_for_itself(byte) && n-- == 0) return static_cast<unsigned char>(byte);
  return std::nullopt;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string to_token_string(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) append_utf8(out, char_of(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::string> to_bytes(std::string_view token_string) {
  std::string out;
  out.reserve(token_string.size());
  for (std::size_t at = 0; at < token_string.size();) {
    const unicode::Decoded d = unicode::decode_utf8(token_string, at);
    const auto byte = byte_of(d.code_point);
    if (!byte) return std::nullopt;
    out += static_cast<char>(*byte);
    at += d.length;
  }
  return out;
}

}  // namespace plexus::data::byte_level

// Rendering values, keys and numbers for messages.
#include "internal.hpp"

#include <boost/json/serialize.hpp>

#include <array>
#include <charconv>

namespace plexus::config {

namespace {

// Longest string value shown in full in a message; longer ones are cut.
constexpr std::size_t max_shown_string = 60;

std::string quoted_string(std::string_view s) {
  std::string out = boost::json::serialize(boost::json::string_view(s.data(), s.size()));
  if (s.size() > max_shown_string) {
    const std::string cut = detail::shorten(s, max_shown_string);
    out = boost::json::serialize(boost::json::string_view(cut.data(), cut.size() - 3));
    out.insert(out.size() - 1, "...");
    out += " (" + std::to_string(s.size()) + " bytes)";
  }
  return out;
}

}  // namespace

std::string describe(const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::null:
      return "null";
    case boost::json::kind::bool_:
      return v.get_bool() ? "true" : "false";
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::double_:
      return "number " + detail::format_number(v);
    case boost::json::kind::string:
      return "string " + quoted_string(v.get_string());
    case boost::json::kind::array:
      return "array of " + std::to_string(v.get_array().size());
    case boost::json::kind::object:
      return "object";
  }
  return "value";  // unreachable: every kind is handled above
}

namespace detail {

std::string format_number(const boost::json::value& v) {
  if (v.is_int64()) return std::to_string(v.get_int64());
  if (v.is_uint64()) return std::to_string(v.get_uint64());
  std::array<char, 64> buf{};
  // Shortest round-trip form, so messages show the number the user wrote.
  const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v.get_double());
  std::string out(buf.data(), ec == std::errc() ? end : buf.data());
  // A double that prints like an integer gets ".0" so "expected an integer,
  // got number 4.0" shows why 4.0 was refused.
  if (out.find_first_of(".eni") == std::string::npos) out += ".0";
  return out;
}

std::string literal(const boost::json::value& v) {
  if (v.is_number()) return format_number(v);
  if (v.is_string()) return quoted_string(v.get_string());
  return describe(v);
}

std::string shorten(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t cut = max_bytes;
  // Never split a UTF-8 sequence: back up over continuation bytes (10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0U) == 0x80U) --cut;
  return std::string(text.substr(0, cut)) + "...";
}

namespace {

bool control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

void append_escaped(std::string& out, char c) {
  constexpr std::string_view hex = "0123456789abcdef";
  const auto u = static_cast<unsigned char>(c);
  out += "\\x";
  out += hex[u >> 4U];
  out += hex[u & 0xFU];
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out;
  for (const char c : shorten(text, max_bytes)) {
    if (control(c)) {
      append_escaped(out, c);
    } else {
      out += c;
    }
  }
  return out;
}

std::string quote_key(std::string_view key) {
  std::string out = "'";
  for (const char c : shorten(key, max_shown_string)) {
    // Quotes and backslashes are escaped too, so the quoting is unambiguous.
    if (control(c) || c == '\'' || c == '\\') {
      append_escaped(out, c);
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

}  // namespace detail
}  // namespace plexus::config

// Turning byte offsets in config text into file:line:column and an excerpt.
#include "internal.hpp"

namespace plexus::config::detail {

namespace {

bool continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0U) == 0x80U;
}

// Characters (not bytes) in text, so columns match what editors show.
std::size_t count_chars(std::string_view text) {
  std::size_t n = 0;
  for (const char c : text) n += continuation_byte(c) ? 0U : 1U;
  return n;
}

std::size_t line_start(std::string_view text, std::size_t offset) {
  const std::size_t nl = text.rfind('\n', offset == 0 ? 0 : offset - 1);
  return (nl == std::string_view::npos || nl >= offset) ? 0 : nl + 1;
}

// Excerpt windows: lines longer than this are cut around the error.
constexpr std::size_t max_excerpt_bytes = 100;
constexpr std::size_t context_before = 60;

std::size_t back_to_boundary(std::string_view text, std::size_t pos) {
  while (pos > 0 && pos < text.size() && continuation_byte(text[pos])) --pos;
  return pos;
}

}  // namespace

std::string source_location(std::string_view text, std::size_t offset, std::string_view origin) {
  offset = std::min(offset, text.size());
  std::size_t line = 1;
  for (std::size_t i = 0; i < offset; ++i) line += text[i] == '\n' ? 1U : 0U;
  const std::size_t start = line_start(text, offset);
  const std::size_t column = 1 + count_chars(text.substr(start, offset - start));
  return std::string(origin) + ":" + std::to_string(line) + ":" + std::to_string(column);
}

std::string source_excerpt(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  const std::size_t start = line_start(text, offset);
  std::size_t end = text.find('\n', offset);
  if (end == std::string_view::npos) end = text.size();
  std::string_view line = text.substr(start, end - start);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::size_t at = offset - start;  // error position within line, in bytes
  if (line.find_first_not_of(" \t") == std::string_view::npos) return {};

  std::string prefix;
  std::string suffix;
  if (at > context_before) {
    const std::size_t cut = back_to_boundary(line, at - context_before);
    line.remove_prefix(cut);
    at -= cut;
    prefix = "...";
  }
  if (line.size() > max_excerpt_bytes) {
    line = line.substr(0, back_to_boundary(line, max_excerpt_bytes));
    suffix = "...";
  }
  std::string shown = prefix;
  for (const char c : line) {
    // Tabs and other control characters become spaces so the caret lines up.
    const auto u = static_cast<unsigned char>(c);
    shown += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  shown += suffix;
  const std::size_t caret = prefix.size() + count_chars(line.substr(0, std::min(at, line.size())));
  return "\n    " + shown + "\n    " + std::string(caret, ' ') + "^";
}

}  // namespace plexus::config::detail

// Lookups over the generated Unicode tables, and UTF-8 decoding.
#include <algorithm>
#include <array>

#include "data/unicode.hpp"

namespace plexus::data::unicode {
namespace {

Category lookup(char32_t code_point) noexcept {
  const CategoryRun* end = kCategoryRuns + kCategoryRunCount;
  const CategoryRun* after = std::upper_bound(
      kCategoryRuns, end, code_point, [](char32_t cp, const CategoryRun& run) { return cp < run.first; });
  return after == kCategoryRuns ? Cn : static_cast<Category>((after - 1)->category);
}

// Latin-1 is most of most text: one table read instead of a binary search.
const std::array<Category, 256>& latin1() noexcept {
  static const std::array<Category, 256> table = [] {
    std::array<Category, 256> t{};
    for (char32_t cp = 0; cp < 256; ++cp) t[cp] = lookup(cp);
    return t;
  }();
  return table;
}

}  // namespace

Category category(char32_t code_point) noexcept {
  if (code_point < 256) return latin1()[code_point];
  if (code_point > 0x10FFFF) return Cn;
  return lookup(code_point);
}

bool is_white_space(char32_t code_point) noexcept {
  if (code_point < 0x80) return code_point == ' ' || (code_point >= 0x09 && code_point <= 0x0D);
  if (code_point == 0x85) return true;
  const Category c = category(code_point);
  return c == Zs || c == Zl || c == Zp;
}

Decoded decode_utf8(std::string_view text, std::size_t at) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char c = byte(at);
  if (c < 0x80) return {c, 1};
  const Decoded invalid{kInvalidByteBase + c, 1};
  uint32_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (no overlongs, no surrogates)
  char32_t value = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    length = 2;
    value = c & 0x1Fu;
  } else if (c >= 0xE0 && c <= 0xEF) {
    length = 3;
    value = c & 0x0Fu;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    length = 4;
    value = c & 0x07u;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return invalid;
  }
  if (at + length > text.size()) return invalid;
  for (uint32_t k = 1; k < length; ++k) {
    const unsigned char next = byte(at + k);
    if (next < (k == 1 ? lo : 0x80) || next > (k == 1 ? hi : 0xBF)) return invalid;
    value = (value << 6) | (next & 0x3Fu);
  }
  return {value, length};
}

}  // namespace plexus::data::unicode

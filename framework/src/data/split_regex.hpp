// The regular expressions of tokenizer.json pre-tokenizers (GPT-2's split regex, Llama 3's
// Split pattern), matched as Hugging Face's tokenizers matches them: with Oniguruma's syntax
// and semantics (backtracking, the first alternative that matches wins, greedy by default).
//
// Supported: literals and escapes (\t \n \r \f \v \a \e \xHH \x{H..} \uHHHH, escaped
// punctuation), `.` (anything but \n), classes [...] and [^...] with ranges, \s \S \d \D,
// \p{..} \P{..} \p{^..} over General_Category (L, Lu, Letter, N, Nd, LC, ...), groups (...)
// (?:...), case-insensitive groups (?i:...) of ASCII literals (and (?i) at the very start),
// lookahead (?=...) (?!...), alternation, and the quantifiers ? * + {n} {n,} {,m} {n,m} with
// their lazy forms. Anything else (anchors, \b, \w, lookbehind, backreferences, possessive
// quantifiers, nested classes, scripts) is refused with a RegexError naming the construct and
// its offset, so a tokenizer.json whose pattern is not understood is never encoded wrongly.
//
// Code points are classified by the generated tables of unicode.hpp (the Unicode version of
// tokenizers' Oniguruma). Bytes that are not well-formed UTF-8 count as one unassigned (Cn)
// character each.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/unicode.hpp"

namespace plexus::data {

// A pattern that cannot be compiled; what() names the construct and its byte offset.
class RegexError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A set of code points: the union of its items, complemented when `negated`.
struct CharClass {
  struct Item {
    enum Kind : uint8_t { range, categories, white_space } kind = range;
    bool negated = false;  // \S, \D, \P{..}
    char32_t lo = 0, hi = 0;
    unicode::CategoryMask mask = 0;
  };
  std::vector<Item> items;
  bool negated = false;
  std::bitset<128> ascii;  // membership of U+0000..U+007F, filled by finish()

  void finish();
  bool matches(char32_t code_point) const noexcept {
    return code_point < 128 ? ascii.test(code_point) : matches_slow(code_point);
  }
  bool matches_slow(char32_t code_point) const noexcept;
};

// The compiled program of a backtracking matcher.
struct RegexInst {
  enum Op : uint8_t { match_class, split, jump, lookahead, match } op = match;
  int32_t x = 0, y = 0;  // class index; split: first, second; jump: target; lookahead: end, negated
};

struct RegexProgram {
  std::vector<RegexInst> code;
  std::vector<CharClass> classes;
};

// Compiles `pattern` (UTF-8) or throws RegexError.
RegexProgram compile_regex(std::string_view pattern);

class SplitRegex {
 public:
  // Throws RegexError.
  explicit SplitRegex(std::string pattern);

  const std::string& pattern() const noexcept { return pattern_; }

  // Every match in `text`, [begin, end) byte offsets, found as Oniguruma's search loop finds
  // them: each search starts where the previous match ended; an empty match right where the
  // previous one ended is skipped by one character. Throws RegexError when one match attempt
  // backtracks more than 10 million steps (Oniguruma's own retry limit).
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  std::string pattern_;
  RegexProgram program_;
};

}  // namespace plexus::data

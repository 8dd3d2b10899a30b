// The split regex of tokenizer.json pre-tokenizers and the Unicode tables under it. The expected
// splits were produced by Hugging Face's tokenizers 0.22.2 (Oniguruma):
//   pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)
// The integration suite tokenizers_interop compares many more texts against the live library.
#define BOOST_TEST_MODULE split_regex
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "data/split_regex.hpp"
#include "data/unicode.hpp"

using plexus::data::RegexError;
using plexus::data::SplitRegex;
namespace uc = plexus::data::unicode;

namespace {

const char* const kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Isolated splitting, as the pre-tokenizer does it: matches and the runs between them.
std::vector<std::string> split(const std::string& pattern, const std::string& text) {
  const SplitRegex regex(pattern);
  std::vector<std::string> pieces;
  std::size_t previous = 0;
  for (const auto& [begin, end] : regex.find_all(text)) {
    if (begin > previous) pieces.push_back(text.substr(previous, begin - previous));
    if (end > begin) pieces.push_back(text.substr(begin, end - begin));
    previous = end;
  }
  if (previous < text.size()) pieces.push_back(text.substr(previous));
  return pieces;
}

using Pieces = std::vector<std::string>;

std::string refusal(const std::string& pattern) {
  try {
    SplitRegex regex(pattern);
  } catch (const RegexError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(unicode_tables_classify_as_oniguruma_does) {
  BOOST_TEST(std::string(uc::kUnicodeVersion) == "16.0.0");
  BOOST_TEST(uc::category(U'A') == uc::Lu);
  BOOST_TEST(uc::category(U'\u00E9') == uc::Ll);      // é
  BOOST_TEST(uc::category(U'\u4E2D') == uc::Lo);      // 中
  BOOST_TEST(uc::category(U'\u0663') == uc::Nd);      // Arabic-Indic three
  BOOST_TEST(uc::category(U'\u2167') == uc::Nl);      // Roman numeral eight
  BOOST_TEST(uc::category(U'\U0001F389') == uc::So);  // 🎉
  BOOST_TEST(uc::category(U'\u1C89') == uc::Lu);      // new in Unicode 16.0
  BOOST_TEST(uc::category(U'\u0378') == uc::Cn);      // unassigned
  BOOST_TEST(uc::category(0x10FFFF) == uc::Cn);
  BOOST_TEST(uc::category(uc::kInvalidByteBase + 0xFF) == uc::Cn);
  for (const char32_t space :
       {0x09, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000})
    BOOST_TEST(uc::is_white_space(space), static_cast<unsigned>(space));
  for (const char32_t other : {0x08, 0x0E, 0x1C, 0x180E, 0x200B, 0xFEFF})
    BOOST_TEST(!uc::is_white_space(other));
}

BOOST_AUTO_TEST_CASE(utf8_decoding_takes_invalid_bytes_one_by_one) {
  const std::string text =
      "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x8E\x89\xC0\xAF\xED\xA0\x80\xF4\x90\x80\x80\xE4\xB8";
  std::vector<uint32_t> cps;
  for (std::size_t at = 0; at < text.size();) {
    const auto d = uc::decode_utf8(text, at);
    cps.push_back(static_cast<uint32_t>(d.code_point));
    at += d.length;
  }
  // é, 中, 🎉; then an overlong C0 AF, a surrogate ED A0 80, F4 90 80 80 beyond U+10FFFF and a
  // truncated E4 B8: each of their bytes alone.
  const uint32_t bad = uc::kInvalidByteBase;
  const std::vector<uint32_t> expected{U'a',       0xE9,       0x4E2D,     0x1F389,    bad + 0xC0,
                                       bad + 0xAF, bad + 0xED, bad + 0xA0, bad + 0x80, bad + 0xF4,
                                       bad + 0x90, bad + 0x80, bad + 0x80, bad + 0xE4, bad + 0xB8};
  BOOST_TEST(cps == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(gpt2_pattern_splits_as_tokenizers_does) {
  BOOST_TEST(split(kGpt2, "Hello world!") == (Pieces{"Hello", " world", "!"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(kGpt2, "it's   3.14159 x") == (Pieces{"it", "'s", "  ", " 3", ".", "14159", " x"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(kGpt2, "I'M HERE'S '\u017F") == (Pieces{"I", "'", "M", " HERE", "'", "S", " '", "\u017F"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(kGpt2, "  a\n\n b") == (Pieces{" ", " a", "\n\n", " b"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(kGpt2, "na\u00EFve caf\u00E9 \u4E2D\u6587 123456") ==
                 (Pieces{"na\u00EFve", " caf\u00E9", " \u4E2D\u6587", " 123456"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(kGpt2, "\t\u3000x\u00A0y") == (Pieces{"\t", "\u3000", "x", "\u00A0", "y"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(llama3_pattern_with_case_insensitive_contractions_and_digit_triples) {
  BOOST_TEST(
      split(kLlama3, "it's   3.14159 x") == (Pieces{"it", "'s", "  ", " ", "3", ".", "141", "59", " x"}),
      boost::test_tools::per_element());
  BOOST_TEST(split(kLlama3, "I'M HERE'S '\u017F") == (Pieces{"I", "'M", " HERE", "'S", " '", "\u017F"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(kLlama3, "na\u00EFve caf\u00E9 \u4E2D\u6587 123456") ==
                 (Pieces{"na\u00EFve", " caf\u00E9", " \u4E2D\u6587", " ", "123", "456"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(kLlama3, "\t\u3000x\u00A0y") == (Pieces{"\t", "\u3000x", "\u00A0y"}),
             boost::test_tools::per_element());
  // (?i) folds as Unicode does: U+017F LONG S is an s, U+212A KELVIN SIGN a k.
  BOOST_TEST(split("(?i:'s|k)", "'\u017F\u212A") == (Pieces{"'\u017F", "\u212A"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(empty_matches_are_skipped_as_onigurumas_search_loop_does) {
  BOOST_TEST(split("a*", "baab") == (Pieces{"b", "aa", "b"}), boost::test_tools::per_element());
  BOOST_TEST(split("x?", "ab") == (Pieces{"a", "b"}), boost::test_tools::per_element());
  BOOST_TEST(split(R"(\s+(?!\S))", "a   b  ") == (Pieces{"a", "  ", " b", "  "}),
             boost::test_tools::per_element());
  BOOST_TEST(SplitRegex("a*").find_all("").size() == 1u);  // one empty match, dropped by the splitter
}

BOOST_AUTO_TEST_CASE(alternatives_and_repeats_follow_backtracking_order) {
  BOOST_TEST(split("ab|abc", "abc") == (Pieces{"ab", "c"}),
             boost::test_tools::per_element());  // first alternative wins
  BOOST_TEST(split("a{2,3}", "aaaaaaa") == (Pieces{"aaa", "aaa", "a"}), boost::test_tools::per_element());
  BOOST_TEST(split("a{2,3}?", "aaaaa") == (Pieces{"aa", "aa", "a"}), boost::test_tools::per_element());
  BOOST_TEST(split("a+?b", "aaab") == (Pieces{"aaab"}), boost::test_tools::per_element());
  BOOST_TEST(split("(?=b)a|a", "ab") == (Pieces{"a", "b"}), boost::test_tools::per_element());
  BOOST_TEST(split(R"([\x{4E00}-\x{9FFF}]+|\u0041)", "A\u4E2D\u6587B") == (Pieces{"A", "\u4E2D\u6587", "B"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(R"([^\d\s]+)", "ab 12 \u0663c") == (Pieces{"ab", " 12 \u0663", "c"}),
             boost::test_tools::per_element());
  BOOST_TEST(split("(?i)ab", "xAbaB") == (Pieces{"x", "Ab", "aB"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(invalid_utf8_bytes_split_as_single_characters) {
  // Each byte is a character outside \s, \p{L} and \p{N}: GPT-2's ` ?[^\s\p{L}\p{N}]+` takes them.
  BOOST_TEST(split(kGpt2, "ab\xFF\xFE cd") == (Pieces{"ab", "\xFF\xFE", " cd"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(unsupported_constructs_are_refused_by_name_and_offset) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(?<=a)b", "lookbehind at offset 0"},
      {"(?<!a)b", "lookbehind"},
      {R"(\bword)", "an anchor"},
      {"^a", "anchor '^'"},
      {"a$", "anchor '$'"},
      {R"(\w+)", "word characters"},
      {R"((a)\1)", "backreference"},
      {"a++", "possessive quantifier"},
      {"a?+", "possessive quantifier"},
      {"a**", "a quantifier after a quantifier"},
      {"[a[b]]", "a nested class"},
      {"[a&&b]", "class intersection"},
      {R"(\p{Han})", R"(property \p{Han})"},
      {"a(?i)b", "an inline option (?i)"},
      {"(?i:ss)", "\"ss\""},
      {"(?i:\u00E9)", "U+00E9"},
      {R"((?i:\p{Lu}))", "inside a case-insensitive group"},
      {"(?i:[a-z])", "a character class inside a case-insensitive group"},
      {"(a*)*", "an unbounded repeat of something that can match nothing"},
      {"a{1001}", "repeat count above 1000"},
      {"a{3,2}", "max < min"},
      {"(ab", "unterminated group"},
      {"ab)", "unmatched ')'"},
      {"[ab", "unterminated character class"},
      {"*a", "with nothing to repeat"},
      {"a{x", "'{' that does not start a repeat"},
      {"[z-a]", "out of order"},
      {"\\", "a trailing backslash"},
      {"(?<name>a)", "group syntax"},
      {"a\xFF", "invalid UTF-8"},
  };
  for (const auto& [pattern, expected] : cases) {
    const std::string message = refusal(pattern);
    BOOST_TEST(contains(message, expected), pattern << " -> " << message);
    BOOST_TEST(contains(message, "offset"), pattern << " -> " << message);
  }
}

BOOST_AUTO_TEST_CASE(runaway_backtracking_stops_with_an_error_instead_of_hanging) {
  const SplitRegex regex("(a|a)+b");
  const std::string text(40, 'a');
  const auto start = std::chrono::steady_clock::now();
  BOOST_CHECK_EXCEPTION(regex.find_all(text), RegexError,
                        [](const RegexError& e) { return contains(e.what(), "backtracked more than"); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BOOST_TEST(seconds < 30.0);
}

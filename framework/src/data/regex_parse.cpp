// Parses a split regex in Oniguruma's (Ruby) syntax into a RegexTree, refusing every construct
// split_regex.hpp does not list, by name and offset.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <string>

#include "data/regex_tree.hpp"

namespace plexus::data {
namespace {

using unicode::CategoryMask;
using unicode::mask_of;

constexpr int kMaxDepth = 64;
constexpr int32_t kMaxRepeat = 1000;

std::string hex_code_point(char32_t cp) {
  char text[16];
  std::snprintf(text, sizeof text, "U+%04X", static_cast<unsigned>(cp));
  return text;
}

// General_Category names as Oniguruma accepts them (case, spaces, '_' and '-' ignored): the short
// and long aliases of PropertyValueAliases.txt.
bool category_mask(const std::string& name, CategoryMask& mask) {
  std::string key;
  for (const char c : name)
    if (c != ' ' && c != '_' && c != '-')
      key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  using namespace unicode;
  const CategoryMask letters = mask_of(Lu) | mask_of(Ll) | mask_of(Lt) | mask_of(Lm) | mask_of(Lo);
  const CategoryMask cased = mask_of(Lu) | mask_of(Ll) | mask_of(Lt);
  const CategoryMask marks = mask_of(Mn) | mask_of(Mc) | mask_of(Me);
  const CategoryMask numbers = mask_of(Nd) | mask_of(Nl) | mask_of(No);
  const CategoryMask punctuation =
      mask_of(Pc) | mask_of(Pd) | mask_of(Ps) | mask_of(Pe) | mask_of(Pi) | mask_of(Pf) | mask_of(Po);
  const CategoryMask symbols = mask_of(Sm) | mask_of(Sc) | mask_of(Sk) | mask_of(So);
  const CategoryMask separators = mask_of(Zs) | mask_of(Zl) | mask_of(Zp);
  const CategoryMask others = mask_of(Cc) | mask_of(Cf) | mask_of(Cs) | mask_of(Co) | mask_of(Cn);
  struct Name {
    const char* short_name;
    const char* long_name;
    CategoryMask mask;
  };
  const std::array<Name, 38> names{{
      {"l", "letter", letters},
      {"lc", "casedletter", cased},
      {"lu", "uppercaseletter", mask_of(Lu)},
      {"ll", "lowercaseletter", mask_of(Ll)},
      {"lt", "titlecaseletter", mask_of(Lt)},
      {"lm", "modifierletter", mask_of(Lm)},
      {"lo", "otherletter", mask_of(Lo)},
      {"m", "mark", marks},
      {"mn", "nonspacingmark", mask_of(Mn)},
      {"mc", "spacingmark", mask_of(Mc)},
      {"me", "enclosingmark", mask_of(Me)},
      {"n", "number", numbers},
      {"nd", "decimalnumber", mask_of(Nd)},
      {"nl", "letternumber", mask_of(Nl)},
      {"no", "othernumber", mask_of(No)},
      {"p", "punctuation", punctuation},
      {"pc", "connectorpunctuation", mask_of(Pc)},
      {"pd", "dashpunctuation", mask_of(Pd)},
      {"ps", "openpunctuation", mask_of(Ps)},
      {"pe", "closepunctuation", mask_of(Pe)},
      {"pi", "initialpunctuation", mask_of(Pi)},
      {"pf", "finalpunctuation", mask_of(Pf)},
      {"po", "otherpunctuation", mask_of(Po)},
      {"s", "symbol", symbols},
      {"sm", "mathsymbol", mask_of(Sm)},
      {"sc", "currencysymbol", mask_of(Sc)},
      {"sk", "modifiersymbol", mask_of(Sk)},
      {"so", "othersymbol", mask_of(So)},
      {"z", "separator", separators},
      {"zs", "spaceseparator", mask_of(Zs)},
      {"zl", "lineseparator", mask_of(Zl)},
      {"zp", "paragraphseparator", mask_of(Zp)},
      {"c", "other", others},
      {"cc", "control", mask_of(Cc)},
      {"cf", "format", mask_of(Cf)},
      {"cs", "surrogate", mask_of(Cs)},
      {"co", "privateuse", mask_of(Co)},
      {"cn", "unassigned", mask_of(Cn)},
  }};
  if (key == "l&") key = "lc";
  for (const Name& n : names) {
    if (key == n.short_name || key == n.long_name) {
      mask = n.mask;
      return true;
    }
  }
  return false;
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  RegexTree parse() {
    bool icase = false;
    if (p_.starts_with("(?i)")) {  // the whole pattern; elsewhere (?i) is refused (see below)
      icase = true;
      at_ = 4;
    }
    RegexTree tree;
    tree.root = alternation(icase, 0);
    if (at_ < p_.size()) fail("unmatched ')'");
    tree.classes = std::move(classes_);
    return tree;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(at_, what); }
  [[noreturn]] static void fail_at(std::size_t offset, const std::string& what) {
    throw RegexError(what + " at offset " + std::to_string(offset) + " of the pattern");
  }
  bool done() const { return at_ >= p_.size(); }
  char peek() const { return done() ? '\0' : p_[at_]; }
  bool take(std::string_view s) {
    if (!p_.substr(at_).starts_with(s)) return false;
    at_ += s.size();
    return true;
  }

  RegexNode alternation(bool icase, int depth) {
    if (depth > kMaxDepth) fail("groups nested more than " + std::to_string(kMaxDepth) + " deep");
    std::vector<RegexNode> branches;
    branches.push_back(concat(icase, depth));
    while (take("|")) branches.push_back(concat(icase, depth));
    if (branches.size() == 1) return std::move(branches.front());
    RegexNode node;
    node.kind = RegexNode::alternation;
    node.children = std::move(branches);
    return node;
  }

  RegexNode concat(bool icase, int depth) {
    RegexNode node;
    node.kind = RegexNode::concat;
    std::string literal_run;  // lower-cased ASCII literals in a row, for the multi-fold check
    std::size_t run_start = at_;
    while (!done() && peek() != '|' && peek() != ')') {
      const std::size_t start = at_;
      char32_t literal = 0;
      RegexNode item = atom(icase, depth, literal);
      const bool quantified = quantifier(item);
      if (icase && literal != 0 && !quantified) {
        if (literal_run.empty()) run_start = start;
        literal_run += static_cast<char>(std::tolower(static_cast<int>(literal)));
        check_multi_fold(literal_run, run_start);
      } else {
        literal_run.clear();
      }
      node.children.push_back(std::move(item));
    }
    if (node.children.size() == 1) return std::move(node.children.front());
    if (node.children.empty()) node.kind = RegexNode::empty;
    return node;
  }

  // Oniguruma lets one character match several pattern characters when it folds to them
  // (U+00DF matches (?i:ss)); that is not implemented, so such a pattern is refused.
  void check_multi_fold(const std::string& run, std::size_t run_start) const {
    for (std::size_t i = 0; i < unicode::kAsciiMultiFoldCount; ++i) {
      const std::string_view fold = unicode::kAsciiMultiFolds[i];
      if (run.size() >= fold.size() && run.ends_with(fold))
        fail_at(run_start,
                "case-insensitive \"" + std::string(fold) +
                    "\" (which a single character folds to, e.g. U+00DF to \"ss\") is not supported");
    }
  }

  // Applies a quantifier after an atom, if there is one.
  bool quantifier(RegexNode& item) {
    const std::size_t start = at_;
    int32_t min = 0, max = -1;
    if (take("?")) {
      max = 1;
    } else if (take("*")) {
    } else if (take("+")) {
      min = 1;
    } else if (peek() == '{') {
      if (!interval(min, max))
        fail("'{' that does not start a repeat {n}, {n,}, {,m} or {n,m} (escape it as \\{)");
    } else {
      return false;
    }
    bool greedy = true;
    if (take("?")) greedy = false;
    if (peek() == '+') fail("possessive quantifier '" + std::string(p_.substr(start, at_ + 1 - start)) + "'");
    if (peek() == '*' || peek() == '?' || peek() == '{') fail("a quantifier after a quantifier");
    if (max < 0 && nullable(item)) fail_at(start, "an unbounded repeat of something that can match nothing");
    RegexNode node;
    node.kind = RegexNode::repeat;
    node.min = min;
    node.max = max;
    node.greedy = greedy;
    node.children.push_back(std::move(item));
    item = std::move(node);
    return true;
  }

  bool number(int32_t& value) {
    const std::size_t start = at_;
    int64_t v = 0;
    while (!done() && std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail_at(start, "repeat count above " + std::to_string(kMaxRepeat));
      ++at_;
    }
    value = static_cast<int32_t>(v);
    return at_ > start;
  }

  bool interval(int32_t& min, int32_t& max) {
    const std::size_t start = at_;
    ++at_;  // '{'
    int32_t lo = 0, hi = -1;
    const bool has_lo = number(lo);
    if (take(",")) {
      if (!number(hi)) hi = -1;
      if (!has_lo && hi < 0) return at_ = start, false;
    } else {
      if (!has_lo) return at_ = start, false;
      hi = lo;
    }
    if (!take("}")) return at_ = start, false;
    if (hi >= 0 && hi < lo)
      fail_at(start, "repeat {" + std::to_string(lo) + "," + std::to_string(hi) + "}: max < min");
    min = lo;
    max = hi;
    return true;
  }

  int32_t add_class(CharClass c) {
    c.finish();
    classes_.push_back(std::move(c));
    return static_cast<int32_t>(classes_.size() - 1);
  }

  RegexNode class_node(CharClass c) {
    RegexNode node;
    node.kind = RegexNode::char_class;
    node.class_index = add_class(std::move(c));
    return node;
  }

  static CharClass::Item range_item(char32_t lo, char32_t hi) {
    CharClass::Item item;
    item.kind = CharClass::Item::range;
    item.lo = lo;
    item.hi = hi;
    return item;
  }

  char32_t next_code_point() {
    const unicode::Decoded d = unicode::decode_utf8(p_, at_);
    if (d.code_point >= unicode::kInvalidByteBase) fail("invalid UTF-8 in the pattern");
    at_ += d.length;
    return d.code_point;
  }

  // A literal under (?i): an ASCII letter matches both cases and what folds to it.
  RegexNode literal_node(char32_t cp, bool icase, std::size_t start) {
    CharClass c;
    c.items.push_back(range_item(cp, cp));
    if (icase && cp >= 0x80)
      fail_at(start, "case-insensitive matching of " + hex_code_point(cp) +
                         " (only ASCII is supported inside (?i))");
    if (icase && std::isalpha(static_cast<int>(cp))) {
      const char lower = static_cast<char>(std::tolower(static_cast<int>(cp)));
      const char upper = static_cast<char>(std::toupper(static_cast<int>(cp)));
      c.items = {range_item(static_cast<char32_t>(lower), static_cast<char32_t>(lower)),
                 range_item(static_cast<char32_t>(upper), static_cast<char32_t>(upper))};
      for (std::size_t i = 0; i < unicode::kAsciiFoldCount; ++i)
        if (unicode::kAsciiFolds[i].letter == lower)
          c.items.push_back(
              range_item(unicode::kAsciiFolds[i].code_point, unicode::kAsciiFolds[i].code_point));
    }
    return class_node(std::move(c));
  }

  RegexNode group(bool icase, int depth) {
    const std::size_t start = at_;
    ++at_;  // '('
    RegexNode node;
    if (take("?")) {
      if (take(":")) {
        node = alternation(icase, depth + 1);
      } else if (take("i:")) {
        node = alternation(true, depth + 1);
      } else if (take("-i:")) {
        node = alternation(false, depth + 1);
      } else if (take("=") || take("!")) {
        node.kind = RegexNode::lookahead;
        node.negative = p_[at_ - 1] == '!';
        node.children.push_back(alternation(icase, depth + 1));
      } else if (take("<=") || take("<!")) {
        fail_at(start, "lookbehind");
      } else if (take("i)") || take("-i)")) {
        fail_at(start, "an inline option (?i) other than at the start of the pattern (write (?i:...))");
      } else {
        fail_at(start, "group syntax '(?" + std::string(p_.substr(at_, 1)) + "'");
      }
    } else {
      node = alternation(icase, depth + 1);  // a capturing group: captures do not matter here
    }
    if (!take(")")) fail_at(start, "unterminated group '('");
    return node;
  }

  // One escape outside or inside a class. Returns true with `cp` set for a literal character,
  // false with `item` set for a set (\s, \d, \p{..}).
  bool escape(char32_t& cp, CharClass::Item& item, bool in_class) {
    const std::size_t start = at_;
    ++at_;  // '\'
    if (done()) fail_at(start, "a trailing backslash");
    const char c = p_[at_];
    if (static_cast<unsigned char>(c) >= 0x80) {
      cp = next_code_point();
      return true;
    }
    ++at_;
    switch (c) {
      case 't':
        cp = '\t';
        return true;
      case 'n':
        cp = '\n';
        return true;
      case 'r':
        cp = '\r';
        return true;
      case 'f':
        cp = '\f';
        return true;
      case 'v':
        cp = '\v';
        return true;
      case 'a':
        cp = 0x07;
        return true;
      case 'e':
        cp = 0x1B;
        return true;
      case 'x':
        cp = hex_escape(start);
        return true;
      case 'u':
        cp = fixed_hex(start, 4);
        return true;
      case 's':
      case 'S':
        item.kind = CharClass::Item::white_space;
        item.negated = c == 'S';
        return false;
      case 'd':
      case 'D':
        item.kind = CharClass::Item::categories;
        item.mask = mask_of(unicode::Nd);
        item.negated = c == 'D';
        return false;
      case 'p':
      case 'P': {
        if (!take("{")) fail_at(start, std::string(1, '\\') + c + " without {Name}");
        bool negated = c == 'P';
        if (take("^")) negated = !negated;
        const std::size_t close = p_.find('}', at_);
        if (close == std::string_view::npos) fail_at(start, "unterminated \\" + std::string(1, c) + "{");
        const std::string name(p_.substr(at_, close - at_));
        at_ = close + 1;
        item.kind = CharClass::Item::categories;
        item.negated = negated;
        if (!category_mask(name, item.mask))
          fail_at(
              start,
              "property \\p{" + name +
                  "}: only General_Category values are supported (L, Lu, Letter, N, Nd, P, S, Z, C, M, ...)");
        return false;
      }
      default:
        break;
    }
    if (!std::isalnum(static_cast<unsigned char>(c))) {
      cp = static_cast<unsigned char>(c);  // escaped punctuation stands for itself
      return true;
    }
    std::string what = "escape \\" + std::string(1, c);
    if (c == 'w' || c == 'W') what += " (word characters; write the classes out, e.g. [\\p{L}\\p{N}_])";
    if (c == 'b' || c == 'B' || c == 'A' || c == 'z' || c == 'Z' || c == 'G') what += " (an anchor)";
    if (std::isdigit(static_cast<unsigned char>(c))) what += " (a backreference or octal escape)";
    if (in_class && c == 'b') what = "escape \\b inside a class";
    fail_at(start, what);
  }

  static char32_t hex_value(char c) {
    return static_cast<char32_t>(c <= '9' ? c - '0' : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
  }

  char32_t fixed_hex(std::size_t start, int digits) {
    char32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      if (done() || !std::isxdigit(static_cast<unsigned char>(peek())))
        fail_at(start, "\\u needs " + std::to_string(digits) + " hex digits");
      value = value * 16 + hex_value(p_[at_++]);
    }
    return value;
  }

  char32_t hex_escape(std::size_t start) {
    if (take("{")) {
      char32_t value = 0;
      int digits = 0;
      while (!done() && std::isxdigit(static_cast<unsigned char>(peek())) && digits < 8) {
        value = value * 16 + hex_value(p_[at_++]);
        ++digits;
      }
      if (digits == 0 || !take("}") || value > 0x10FFFF) fail_at(start, "malformed \\x{...}");
      return value;
    }
    char32_t value = 0;
    int digits = 0;
    while (digits < 2 && !done() && std::isxdigit(static_cast<unsigned char>(peek()))) {
      value = value * 16 + hex_value(p_[at_++]);
      ++digits;
    }
    if (digits == 0) fail_at(start, "\\x without hex digits");
    return value;
  }

  RegexNode bracket_class(bool icase) {
    const std::size_t start = at_;
    if (icase) fail_at(start, "a character class inside a case-insensitive group");
    ++at_;  // '['
    CharClass c;
    if (take("^")) c.negated = true;
    if (peek() == ']') fail("']' first in a class (escape it as \\])");
    while (true) {
      if (done()) fail_at(start, "unterminated character class '['");
      if (take("]")) break;
      if (peek() == '[') fail("a nested class or POSIX bracket inside [...]");
      if (p_.substr(at_).starts_with("&&")) fail("class intersection '&&'");
      char32_t lo = 0;
      if (peek() == '\\') {
        CharClass::Item item;
        if (!escape(lo, item, true)) {
          c.items.push_back(item);
          continue;
        }
      } else {
        lo = next_code_point();
      }
      char32_t hi = lo;
      if (peek() == '-' && at_ + 1 < p_.size() && p_[at_ + 1] != ']') {
        const std::size_t dash = at_++;
        if (peek() == '\\') {
          CharClass::Item item;
          if (!escape(hi, item, true)) fail_at(dash, "a range ending in a class escape");
        } else if (peek() == '[') {
          fail("a nested class or POSIX bracket inside [...]");
        } else {
          hi = next_code_point();
        }
        if (hi < lo)
          fail_at(dash, "range " + hex_code_point(lo) + "-" + hex_code_point(hi) + " out of order");
      }
      c.items.push_back(range_item(lo, hi));
    }
    return class_node(std::move(c));
  }

  RegexNode atom(bool icase, int depth, char32_t& literal) {
    const std::size_t start = at_;
    const char c = peek();
    switch (c) {
      case '(':
        return group(icase, depth);
      case '[':
        return bracket_class(icase);
      case '.': {
        ++at_;
        CharClass any;
        any.negated = true;
        any.items.push_back(range_item('\n', '\n'));
        return class_node(std::move(any));
      }
      case '^':
      case '$':
        fail("anchor '" + std::string(1, c) + "'");
      case '*':
      case '+':
      case '?':
        fail("quantifier '" + std::string(1, c) + "' with nothing to repeat");
      case '{':
        fail("'{' with nothing to repeat (escape it as \\{)");
      case '\\': {
        char32_t cp = 0;
        CharClass::Item item;
        if (escape(cp, item, false)) {
          literal = cp < 0x80 ? cp : 0;
          return literal_node(cp, icase, start);
        }
        if (icase && item.kind == CharClass::Item::categories && item.mask != mask_of(unicode::Nd))
          fail_at(start, "a \\p{..} property inside a case-insensitive group");
        CharClass set;
        set.items.push_back(item);
        return class_node(std::move(set));
      }
      default:
        break;
    }
    const char32_t cp = next_code_point();
    literal = cp < 0x80 ? cp : 0;
    return literal_node(cp, icase, start);
  }

  std::string_view p_;
  std::size_t at_ = 0;
  std::vector<CharClass> classes_;
};

}  // namespace

void CharClass::finish() {
  ascii.reset();
  for (char32_t cp = 0; cp < 128; ++cp)
    if (matches_slow(cp)) ascii.set(cp);
}

bool CharClass::matches_slow(char32_t code_point) const noexcept {
  bool in = false;
  for (const Item& item : items) {
    bool hit = false;
    switch (item.kind) {
      case Item::range:
        hit = code_point >= item.lo && code_point <= item.hi;
        break;
      case Item::categories:
        hit = (item.mask & mask_of(unicode::category(code_point))) != 0;
        break;
      case Item::white_space:
        hit = unicode::is_white_space(code_point);
        break;
    }
    if (hit != item.negated) {
      in = true;
      break;
    }
  }
  return in != negated;
}

bool nullable(const RegexNode& node) {
  switch (node.kind) {
    case RegexNode::empty:
    case RegexNode::lookahead:
      return true;
    case RegexNode::char_class:
      return false;
    case RegexNode::concat:
      return std::all_of(node.children.begin(), node.children.end(),
                         [](const RegexNode& n) { return nullable(n); });
    case RegexNode::alternation:
      return std::any_of(node.children.begin(), node.children.end(),
                         [](const RegexNode& n) { return nullable(n); });
    case RegexNode::repeat:
      return node.min == 0 || nullable(node.children.front());
  }
  return true;
}

RegexTree parse_regex(std::string_view pattern) {
  return Parser(pattern).parse();
}

}  // namespace plexus::data

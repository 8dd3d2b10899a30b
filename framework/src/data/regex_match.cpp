// The backtracking matcher of SplitRegex and the search loop of Hugging Face's tokenizers
// (its onig find_iter): successive leftmost matches, each search starting where the last
// match ended.
#include <string>

#include "data/split_regex.hpp"

namespace plexus::data {
namespace {

// Oniguruma's default retry limit (ONIG_DEFAULT_RETRY_LIMIT_IN_MATCH): a pattern that
// backtracks more than this is refused at the text, not left to run for hours.
constexpr uint64_t kMaxSteps = 10'000'000;

struct Thread {
  int32_t pc;
  std::size_t at;
};

// The first match of the program starting at `pc` anchored at `at`, in Oniguruma's
// preference order; the stack's entries above its size on entry are this call's.
bool run(const RegexProgram& program, int32_t pc, std::string_view text, std::size_t at, std::size_t& end,
         uint64_t& steps, std::vector<Thread>& stack) {
  const std::size_t base = stack.size();
  stack.push_back({pc, at});
  while (stack.size() > base) {
    Thread t = stack.back();
    stack.pop_back();
    while (true) {
      if (++steps > kMaxSteps)
        throw RegexError("the split regex backtracked more than " + std::to_string(kMaxSteps) +
                         " steps matching at byte offset " + std::to_string(at) + " of a text");
      const RegexInst& inst = program.code[static_cast<std::size_t>(t.pc)];
      if (inst.op == RegexInst::match_class) {
        if (t.at >= text.size()) break;
        const auto byte = static_cast<unsigned char>(text[t.at]);
        const unicode::Decoded d = byte < 0x80 ? unicode::Decoded{byte, 1} : unicode::decode_utf8(text, t.at);
        if (!program.classes[static_cast<std::size_t>(inst.x)].matches(d.code_point)) break;
        t.at += d.length;
        ++t.pc;
      } else if (inst.op == RegexInst::split) {
        stack.push_back({inst.y, t.at});
        t.pc = inst.x;
      } else if (inst.op == RegexInst::jump) {
        t.pc = inst.x;
      } else if (inst.op == RegexInst::lookahead) {
        std::size_t ignored = 0;
        const bool found = run(program, t.pc + 1, text, t.at, ignored, steps, stack);
        if (found == (inst.y != 0)) break;
        t.pc = inst.x;
      } else {  // match
        end = t.at;
        stack.resize(base);
        return true;
      }
    }
  }
  return false;
}

}  // namespace

SplitRegex::SplitRegex(std::string pattern)
    : pattern_(std::move(pattern)), program_(compile_regex(pattern_)) {}

std::vector<std::pair<std::size_t, std::size_t>> SplitRegex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::vector<Thread> stack;
  std::size_t from = 0;
  bool matched_before = false;
  std::size_t last_end = 0;
  while (from <= text.size()) {
    // The leftmost match at or after `from`.
    bool found = false;
    std::size_t begin = from, end = 0;
    for (; begin <= text.size();
         begin += begin < text.size() ? unicode::decode_utf8(text, begin).length : 1) {
      uint64_t steps = 0;
      if (run(program_, 0, text, begin, end, steps, stack)) {
        found = true;
        break;
      }
    }
    if (!found) break;
    if (begin == end && matched_before && last_end == end) {
      // An empty match where the previous match ended: search again one character on.
      if (from >= text.size()) break;
      from += unicode::decode_utf8(text, from).length;
      continue;
    }
    matches.emplace_back(begin, end);
    matched_before = true;
    last_end = end;
    from = end;
  }
  return matches;
}

}  // namespace plexus::data

// BpeTokenizer::encode_append, step by step as Hugging Face's tokenizers does it: added tokens
// are cut out first, the rest is pre-tokenized (Split steps, then ByteLevel: prefix space and
// GPT-2's regex), and each piece (a "word") is merged by the BPE model, lowest merge rank
// first, leftmost first among equal ranks.
#include <queue>

#include "data/bpe_state.hpp"
#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {
namespace {

// Hugging Face's cache stops growing at a capacity; so does this one (a corpus's distinct
// words are far fewer).
constexpr std::size_t kCacheCapacity = 1 << 20;

// A run of text that is either an added token (id >= 0) or still to be pre-tokenized.
struct Segment {
  std::string_view text;
  int32_t id = -1;
};

void split_on(const AddedTokenMatcher& matcher, std::string_view text, std::vector<Segment>& out) {
  std::size_t from = 0;
  while (from < text.size()) {
    const auto match = matcher.find(text, from);
    if (!match) break;
    if (match->at > from) out.push_back({text.substr(from, match->at - from)});
    out.push_back({text.substr(match->at, match->length), match->id});
    from = match->at + match->length;
  }
  if (from < text.size()) out.push_back({text.substr(from)});
}

// Isolated splitting: every match and every run between matches, empty ones dropped.
void split_isolated(const SplitRegex& regex, const std::string& piece, std::vector<std::string>& out) {
  std::size_t previous = 0;
  for (const auto& [begin, end] : regex.find_all(piece)) {
    if (begin > previous) out.push_back(piece.substr(previous, begin - previous));
    if (end > begin) out.push_back(piece.substr(begin, end - begin));
    previous = end;
  }
  if (previous < piece.size()) out.push_back(piece.substr(previous));
}

void split_literal(const std::string& literal, const std::string& piece, std::vector<std::string>& out) {
  std::size_t previous = 0, at = 0;
  while (!literal.empty() && (at = piece.find(literal, previous)) != std::string::npos) {
    if (at > previous) out.push_back(piece.substr(previous, at - previous));
    out.push_back(literal);
    previous = at + literal.size();
  }
  if (previous < piece.size()) out.push_back(piece.substr(previous));
}

std::vector<std::string> pre_tokenize_unchecked(const BpeTokenizer::State& s, std::string_view segment);

// The pre-tokenizer on one segment that is not an added token. A pattern that backtracks
// without end on this text is a DataError naming the tokenizer.
std::vector<std::string> pre_tokenize(const BpeTokenizer::State& s, std::string_view segment) {
  try {
    return pre_tokenize_unchecked(s, segment);
  } catch (const RegexError& e) {
    throw DataError(s.source, s.source + ": pre_tokenizer: " + e.what());
  }
}

std::vector<std::string> pre_tokenize_unchecked(const BpeTokenizer::State& s, std::string_view segment) {
  std::vector<std::string> pieces{std::string(segment)};
  std::vector<std::string> next;
  for (const SplitStep& step : s.pre.splits) {
    next.clear();
    for (const std::string& piece : pieces) {
      if (step.is_regex) {
        split_isolated(*step.regex, piece, next);
      } else {
        split_literal(step.pattern, piece, next);
      }
    }
    pieces.swap(next);
  }
  // ByteLevel, on each piece: the prefix space, then GPT-2's regex.
  next.clear();
  for (std::string& piece : pieces) {
    if (s.pre.add_prefix_space && !piece.starts_with(' ')) piece.insert(piece.begin(), ' ');
    if (s.byte_level_regex) {
      split_isolated(*s.byte_level_regex, piece, next);
    } else {
      next.push_back(std::move(piece));
    }
  }
  return next;
}

// One word through the BPE model.
void merge_word(const BpeTokenizer::State& s, const std::string& word, std::vector<int32_t>& out) {
  if (s.ignore_merges) {  // Llama 3: a word that is a token is that token
    if (const auto it = s.bytes_ids.find(word); it != s.bytes_ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool in_unknown = false;  // the last symbol is an unknown run (fuse_unk)
  for (const char c : word) {
    const int32_t id = s.byte_ids[static_cast<unsigned char>(c)];
    if (id >= 0) {
      symbols.push_back({id, 0, 0, true});
      in_unknown = false;
    } else if (s.unk_id) {  // a byte without a token: unk_token, or nothing (Hugging Face drops it)
      if (!(s.fuse_unk && in_unknown)) symbols.push_back({*s.unk_id, 0, 0, true});
      in_unknown = true;
    }
  }
  const auto n = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[static_cast<std::size_t>(i)].prev = i - 1;
    symbols[static_cast<std::size_t>(i)].next = i + 1 < n ? i + 1 : -1;
  }

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int32_t pos) {
    const Symbol& left = symbols[static_cast<std::size_t>(pos)];
    if (left.next < 0) return;
    const auto it = s.merge_table.find(
        BpeTokenizer::State::pair_key(left.id, symbols[static_cast<std::size_t>(left.next)].id));
    if (it != s.merge_table.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    // Stale: one of the two symbols has changed since the pair was queued.
    const auto now = s.merge_table.find(BpeTokenizer::State::pair_key(left.id, right.id));
    if (now == s.merge_table.end() || now->second.second != top.result || now->second.first != top.rank)
      continue;
    left.id = top.result;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol& symbol : symbols)
    if (symbol.alive) out.push_back(symbol.id);
}

void encode_word(const BpeTokenizer::State& s, const std::string& word, std::vector<int32_t>& out) {
  {
    const std::lock_guard lock(s.cache_mutex);
    if (const auto it = s.cache.find(word); it != s.cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t start = out.size();
  merge_word(s, word, out);
  const std::lock_guard lock(s.cache_mutex);
  if (s.cache.size() < kCacheCapacity)
    s.cache.emplace(word, std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
}

std::vector<Segment> segments(const BpeTokenizer::State& s, std::string_view text) {
  std::vector<Segment> first, out;
  split_on(s.raw_added, text, first);
  for (const Segment& segment : first) {
    if (segment.id >= 0) {
      out.push_back(segment);
    } else {
      split_on(s.normalized_added, segment.text, out);
    }
  }
  return out;
}

}  // namespace

void BpeTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  for (const Segment& segment : segments(*state_, text)) {
    if (segment.id >= 0) {
      out.push_back(segment.id);
      continue;
    }
    for (const std::string& word : pre_tokenize(*state_, segment.text)) encode_word(*state_, word, out);
  }
}

std::vector<BpeTokenizer::Piece> BpeTokenizer::pieces(std::string_view text) const {
  std::vector<Piece> out;
  for (const Segment& segment : segments(*state_, text)) {
    if (segment.id >= 0) {
      out.push_back({std::string(segment.text), true});
      continue;
    }
    for (std::string& word : pre_tokenize(*state_, segment.text)) out.push_back({std::move(word), false});
  }
  return out;
}

}  // namespace plexus::data

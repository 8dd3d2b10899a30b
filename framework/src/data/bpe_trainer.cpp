// BpeTrainer: word counts, then merges of the most frequent pair with the pair counts updated
// from the words each merge changes (bpe_trainer.hpp).
#include <algorithm>
#include <queue>
#include <set>

#include "data/bpe_state.hpp"
#include "data/byte_level.hpp"
#include "plexus/core/data/bpe_trainer.hpp"
#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {
namespace {

using PairKey = uint64_t;
PairKey key(int32_t a, int32_t b) {
  return BpeTokenizer::State::pair_key(a, b);
}
int32_t first_of(PairKey k) {
  return static_cast<int32_t>(k >> 32);
}
int32_t second_of(PairKey k) {
  return static_cast<int32_t>(k & 0xFFFFFFFFu);
}

struct Candidate {
  int64_t count;
  PairKey pair;
  // The most frequent first; among equals the smaller pair (first id, then second).
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

// Merges every (a, b) of `word` left to right into `merged`, adding the pair-count changes
// (times the word's count) to `changes`; the count of (a, b) itself is not tracked.
void merge_in_word(Word& word, int32_t a, int32_t b, int32_t merged,
                   std::vector<std::pair<PairKey, int64_t>>& changes) {
  std::vector<int32_t>& s = word.symbols;
  const int64_t c = word.count;
  std::size_t out = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
      if (out > 0) {
        changes.emplace_back(key(s[out - 1], a), -c);
        changes.emplace_back(key(s[out - 1], merged), c);
      }
      if (i + 2 < s.size()) {
        changes.emplace_back(key(b, s[i + 2]), -c);
        changes.emplace_back(key(merged, s[i + 2]), c);
      }
      s[out++] = merged;
      i += 2;
    } else {
      s[out++] = s[i++];
    }
  }
  s.resize(out);
}

}  // namespace

BpeTrainer::BpeTrainer(BpeTrainerOptions options) : options_(std::move(options)) {
  const auto specials = static_cast<int64_t>(options_.special_tokens.size());
  if (options_.vocab_size < 256 + specials)
    throw DataError(
        "", "--vocab-size " + std::to_string(options_.vocab_size) + " is too small: the 256 byte tokens" +
                (specials > 0 ? " and " + std::to_string(specials) + " special tokens" : std::string()) +
                " need " + std::to_string(256 + specials));
  if (options_.vocab_size > (int64_t{1} << 31) - 1)
    throw DataError("",
                    "--vocab-size " + std::to_string(options_.vocab_size) + " does not fit 32-bit token ids");
  std::set<std::string> seen;
  for (const std::string& special : options_.special_tokens) {
    if (special.empty()) throw DataError("", "a special token is empty");
    if (!seen.insert(special).second) throw DataError("", "special token \"" + special + "\" is given twice");
  }
}

void BpeTrainer::add_text(std::string_view text) {
  AddedTokenMatcher specials;
  for (const std::string& special : options_.special_tokens) specials.add(special, 0);
  specials.sort();
  const auto regex = gpt2_split_regex();
  const auto count_words = [&](std::string_view part) {
    for (const auto& [begin, end] : regex->find_all(part)) {
      ++word_counts_[std::string(part.substr(begin, end - begin))];
      ++words_;
    }
  };
  std::size_t from = 0;
  while (const auto match = specials.find(text, from)) {
    count_words(text.substr(from, match->at - from));
    from = match->at + match->length;
  }
  count_words(text.substr(from));
}

BpeTokenizer BpeTrainer::train(BpeTrainingSummary* summary) const {
  if (word_counts_.empty()) throw DataError("", "no text to train a tokenizer on");
  // The 256 bytes, id = byte value.
  std::vector<std::string> token_bytes;
  std::unordered_map<std::string, int32_t> ids;
  for (int b = 0; b < 256; ++b) {
    token_bytes.emplace_back(1, static_cast<char>(b));
    ids.emplace(token_bytes.back(), b);
  }
  // Words in a fixed order (sorted), so training does not depend on hash order.
  std::vector<std::pair<std::string, uint64_t>> sorted(word_counts_.begin(), word_counts_.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [text, count] : sorted) {
    Word word{{}, static_cast<int64_t>(count)};
    for (const char c : text) word.symbols.push_back(static_cast<unsigned char>(c));
    words.push_back(std::move(word));
  }

  std::unordered_map<PairKey, int64_t> counts;
  std::unordered_map<PairKey, std::vector<uint32_t>> where;
  for (std::size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].symbols;
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      const PairKey pair = key(s[i], s[i + 1]);
      counts[pair] += words[w].count;
      auto& list = where[pair];
      if (list.empty() || list.back() != w) list.push_back(static_cast<uint32_t>(w));
    }
  }
  std::priority_queue<Candidate> queue;
  for (const auto& [pair, count] : counts) queue.push({count, pair});

  const auto target = static_cast<std::size_t>(options_.vocab_size) - options_.special_tokens.size();
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::string stopped;
  std::vector<std::pair<PairKey, int64_t>> changes;
  while (token_bytes.size() < target) {
    if (queue.empty()) {
      stopped = "every word is a single token";
      break;
    }
    const Candidate top = queue.top();
    queue.pop();
    const int64_t current = counts[top.pair];
    if (top.count != current) {  // stale: counts changed since it was queued
      if (current > 0) queue.push({current, top.pair});
      continue;
    }
    if (current < static_cast<int64_t>(options_.min_frequency)) {
      stopped = "no pair occurs " + std::to_string(options_.min_frequency) + " times (min frequency)";
      break;
    }
    const int32_t a = first_of(top.pair), b = second_of(top.pair);
    std::string bytes = token_bytes[static_cast<std::size_t>(a)] + token_bytes[static_cast<std::size_t>(b)];
    auto [it, fresh] = ids.emplace(bytes, static_cast<int32_t>(token_bytes.size()));
    if (fresh) token_bytes.push_back(std::move(bytes));
    const int32_t merged = it->second;
    merges.emplace_back(a, b);

    std::vector<uint32_t> touched = std::move(where[top.pair]);
    where.erase(top.pair);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    std::unordered_map<PairKey, int64_t> delta;
    for (const uint32_t w : touched) {
      changes.clear();
      merge_in_word(words[w], a, b, merged, changes);
      for (const auto& [pair, change] : changes) {
        delta[pair] += change;
        if (change > 0) where[pair].push_back(w);
      }
    }
    counts[top.pair] = 0;
    for (const auto& [pair, change] : delta) {
      if (pair == top.pair || change == 0) continue;
      const int64_t now = counts[pair] += change;
      if (change > 0) queue.push({now, pair});
    }
  }

  auto state = std::make_shared<BpeTokenizer::State>();
  for (const std::string& bytes : token_bytes) state->vocab.push_back(byte_level::to_token_string(bytes));
  std::unordered_map<std::string, int32_t> strings;
  for (std::size_t id = 0; id < state->vocab.size(); ++id)
    strings.emplace(state->vocab[id], static_cast<int32_t>(id));
  for (const std::string& special : options_.special_tokens) {
    if (strings.contains(special))
      throw DataError(
          "", "special token \"" + special + "\" is already a token of the vocabulary (as byte-level text)");
    const auto id = static_cast<int32_t>(state->vocab.size());
    state->vocab.push_back(special);
    state->added.push_back({id, special, true, false});
  }
  state->in_vocab.assign(state->vocab.size(), 1);
  state->merges = std::move(merges);
  state->build("the trained tokenizer");
  if (summary != nullptr) {
    summary->distinct_words = words.size();
    summary->words = words_;
    summary->merges = state->merges.size();
    summary->stopped_because = stopped;
  }
  return BpeTokenizer(std::move(state));
}

}  // namespace plexus::data

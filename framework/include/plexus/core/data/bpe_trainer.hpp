// Training a byte-level BPE from text, as `plexus tokenizer train` does.
//
// The text is cut at the special tokens (which are not learned from), split into words by
// GPT-2's regex exactly as encoding splits it (ByteLevel, no prefix space), and the words
// counted. The vocabulary starts with the 256 bytes (id = byte value, so no text is ever out of
// vocabulary) and grows by merges: repeatedly the most frequent adjacent pair of tokens over
// all words (ties: the pair of smaller ids) becomes a new token, until the vocabulary reaches
// vocab_size less the special tokens, or no pair occurs min_frequency times. Pair counts are
// updated incrementally from the words each merge touches, never recounted. The special tokens
// take the last ids, as GPT-2's <|endoftext|> does, and are both vocab entries and added tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "plexus/core/data/bpe_tokenizer.hpp"

namespace plexus::data {

struct BpeTrainerOptions {
  int64_t vocab_size = 0;      // every token, the 256 bytes and the special tokens included
  uint64_t min_frequency = 2;  // a pair seen fewer times is not merged
  std::vector<std::string> special_tokens;
};

struct BpeTrainingSummary {
  std::size_t distinct_words = 0;
  uint64_t words = 0;
  std::size_t merges = 0;
  std::string stopped_because;  // why there are fewer merges than vocab_size allowed, or ""
};

class BpeTrainer {
 public:
  // DataError when the options cannot make a vocabulary (vocab_size below 256 plus the special
  // tokens, an empty or repeated special token).
  explicit BpeTrainer(BpeTrainerOptions options);

  // Counts the words of one text (a document).
  void add_text(std::string_view text);

  // Learns the merges. DataError when nothing was added.
  BpeTokenizer train(BpeTrainingSummary* summary = nullptr) const;

 private:
  BpeTrainerOptions options_;
  std::unordered_map<std::string, uint64_t> word_counts_;
  uint64_t words_ = 0;
};

}  // namespace plexus::data

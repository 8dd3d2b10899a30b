// What a BpeTokenizer is: the tokenizer.json content it was read from (or trained into) and
// the lookup tables build() derives from it for encoding and decoding.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/split_regex.hpp"
#include "plexus/core/data/bpe_tokenizer.hpp"

namespace plexus::data {

// One Split pre-tokenizer step (behavior Isolated, not inverted: every match and every run
// between matches becomes a piece).
struct SplitStep {
  std::string pattern;
  bool is_regex = true;  // {"Regex": ...}; false: {"String": ...}, a literal
  std::shared_ptr<const SplitRegex> regex;
};

struct PreTokenizerSpec {
  bool sequence = false;  // a Sequence of the splits then ByteLevel (Llama 3), or ByteLevel alone
  std::vector<SplitStep> splits;
  bool add_prefix_space = false;
  bool trim_offsets = true;  // offsets only; kept to write the file back
  bool use_regex = true;     // GPT-2's split regex inside ByteLevel
};

// The added tokens of one matching pass, looked up by their first byte.
struct AddedTokenMatcher {
  struct Entry {
    std::string content;
    int32_t id;
  };
  std::array<std::vector<Entry>, 256> by_first_byte;  // longest first
  bool empty = true;

  void add(const std::string& content, int32_t id);
  void sort();
  // The leftmost, then longest, token at or after `from`: its offset, length and id.
  struct Match {
    std::size_t at = 0, length = 0;
    int32_t id = -1;
  };
  std::optional<Match> find(std::string_view text, std::size_t from) const;
};

struct BpeTokenizer::State {
  // ---- as in tokenizer.json -----------------------------------------------------------------
  std::vector<std::string> vocab;                   // id -> token string; "" where no entry
  std::vector<uint8_t> in_vocab;                    // id -> has a model.vocab entry
  std::vector<std::pair<int32_t, int32_t>> merges;  // by rank: the ids of the two parts
  bool merges_as_pairs = false;                     // how the file wrote them (to write back)
  std::vector<AddedToken> added;
  PreTokenizerSpec pre;
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool ignore_merges = false;
  bool byte_fallback = false;

  // ---- derived by build() ---------------------------------------------------------------------
  std::string source;                                  // the file, for messages
  int64_t size = 0;                                    // largest id + 1
  std::unordered_map<std::string, int32_t> vocab_ids;  // token string -> id (model.vocab)
  std::unordered_map<std::string, int32_t> bytes_ids;  // raw bytes -> id (byte-alphabet tokens)
  std::array<int32_t, 256> byte_ids{};                 // the token of each single byte, or -1
  std::size_t missing_bytes = 0;
  std::vector<std::string> decoded;  // id -> the bytes decode() gives
  std::vector<uint8_t> known;        // id -> a vocab or added token has it
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merge_table;  // parts -> rank, result
  std::optional<int32_t> unk_id;
  std::optional<int32_t> end_of_document;
  AddedTokenMatcher raw_added;                         // normalized = false: matched first
  AddedTokenMatcher normalized_added;                  // then these, in what is left
  std::shared_ptr<const SplitRegex> byte_level_regex;  // GPT-2's, when pre.use_regex

  // Each word's ids, as Hugging Face caches them: words repeat (" the", " of").
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  // Derives the tables. Checks what the readers cannot have checked already; `file` names
  // the tokenizer in a DataError.
  void build(const std::string& file);

  static uint64_t pair_key(int32_t a, int32_t b) noexcept {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
};

// GPT-2's split regex, which ByteLevel's use_regex applies.
extern const char* const kGpt2SplitPattern;
std::shared_ptr<const SplitRegex> gpt2_split_regex();

}  // namespace plexus::data

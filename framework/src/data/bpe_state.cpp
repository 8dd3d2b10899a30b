// BpeTokenizer::State::build: the lookup tables of encoding and decoding, from the content of a
// tokenizer.json; and the added-token matcher.
#include <algorithm>

#include "data/bpe_state.hpp"
#include "data/byte_level.hpp"
#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::shared_ptr<const SplitRegex> gpt2_split_regex() {
  static const auto regex = std::make_shared<const SplitRegex>(kGpt2SplitPattern);
  return regex;
}

void AddedTokenMatcher::add(const std::string& content, int32_t id) {
  by_first_byte[static_cast<unsigned char>(content.front())].push_back({content, id});
  empty = false;
}

void AddedTokenMatcher::sort() {
  for (auto& entries : by_first_byte)
    std::stable_sort(entries.begin(), entries.end(),
                     [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::find(std::string_view text,
                                                                std::size_t from) const {
  if (empty) return std::nullopt;
  for (std::size_t at = from; at < text.size(); ++at) {
    for (const Entry& entry : by_first_byte[static_cast<unsigned char>(text[at])])
      if (text.compare(at, entry.content.size(), entry.content) == 0)
        return Match{at, entry.content.size(), entry.id};
  }
  return std::nullopt;
}

void BpeTokenizer::State::build(const std::string& file) {
  source = file;
  const auto fail = [&](const std::string& message) { throw DataError(file, file + ": " + message); };
  int64_t largest = static_cast<int64_t>(vocab.size()) - 1;
  for (const AddedToken& token : added) largest = std::max<int64_t>(largest, token.id);
  size = largest + 1;
  vocab.resize(static_cast<std::size_t>(size));
  in_vocab.resize(static_cast<std::size_t>(size), 0);

  vocab_ids.clear();
  bytes_ids.clear();
  byte_ids.fill(-1);
  decoded.assign(static_cast<std::size_t>(size), std::string());
  known.assign(static_cast<std::size_t>(size), 0);
  for (std::size_t id = 0; id < vocab.size(); ++id) {
    if (!in_vocab[id]) continue;
    const auto id32 = static_cast<int32_t>(id);
    vocab_ids.emplace(vocab[id], id32);
    known[id] = 1;
    // Hugging Face's ByteLevel decoder: a token made of alphabet characters is their bytes,
    // any other token its own UTF-8 text.
    if (const auto bytes = byte_level::to_bytes(vocab[id])) {
      decoded[id] = *bytes;
      bytes_ids.emplace(*bytes, id32);
      if (bytes->size() == 1) byte_ids[static_cast<unsigned char>(bytes->front())] = id32;
    } else {
      decoded[id] = vocab[id];
    }
  }
  missing_bytes = static_cast<std::size_t>(std::count(byte_ids.begin(), byte_ids.end(), -1));
  if (byte_fallback && missing_bytes > 0)
    fail("model.byte_fallback is true and model.vocab lacks " + std::to_string(missing_bytes) +
         " of the 256 byte tokens: byte fallback to <0x..> tokens is not supported");

  merge_table.clear();
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [a, b] = merges[rank];
    const auto result =
        vocab_ids.find(vocab[static_cast<std::size_t>(a)] + vocab[static_cast<std::size_t>(b)]);
    if (result == vocab_ids.end())
      fail("model.merges[" + std::to_string(rank) + "]: the merged token is not in model.vocab");
    merge_table.emplace(pair_key(a, b), std::make_pair(static_cast<uint32_t>(rank), result->second));
  }

  unk_id.reset();
  if (unk_token) {
    const auto unk = vocab_ids.find(*unk_token);
    if (unk == vocab_ids.end()) fail("model.unk_token \"" + *unk_token + "\" is not in model.vocab");
    unk_id = unk->second;
  }

  raw_added = {};
  normalized_added = {};
  end_of_document.reset();
  for (const AddedToken& token : added) {
    const auto id = static_cast<std::size_t>(token.id);
    if (!in_vocab[id]) {
      vocab[id] = token.content;
      decoded[id] = byte_level::to_bytes(token.content).value_or(token.content);
    }
    known[id] = 1;
    (token.normalized ? normalized_added : raw_added).add(token.content, token.id);
  }
  raw_added.sort();
  normalized_added.sort();
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>"}) {
    const auto it = std::find_if(added.begin(), added.end(),
                                 [&](const AddedToken& t) { return t.special && t.content == name; });
    if (it != added.end()) {
      end_of_document = it->id;
      break;
    }
  }

  byte_level_regex = pre.use_regex ? gpt2_split_regex() : nullptr;
  const std::lock_guard lock(cache_mutex);
  cache.clear();
}

}  // namespace plexus::data

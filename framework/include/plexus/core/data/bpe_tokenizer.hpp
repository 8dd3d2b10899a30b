// Byte-level BPE from a Hugging Face tokenizer.json: the format GPT-2, Llama 3 and most models
// ship, and what `plexus tokenizer train` writes. Encoding gives the ids Hugging Face's
// tokenizers gives for encode(text, add_special_tokens=False); the interop tests check it.
//
// What a tokenizer.json must hold to load (anything else is refused, naming the file and the
// field, rather than encoded differently):
// - model: type "BPE" with vocab (token string -> id, ids unique) and merges, as "a b"
//   strings or ["a", "b"] pairs (both parts and their concatenation in vocab); unk_token,
//   fuse_unk, ignore_merges (Llama 3) as Hugging Face applies them; no dropout, no
//   continuing_subword_prefix or end_of_word_suffix. Another model type (WordPiece, Unigram,
//   WordLevel) is refused.
// - pre_tokenizer: ByteLevel (add_prefix_space, use_regex: GPT-2's split regex), or a Sequence
//   of Split steps (a Regex or String pattern, behavior "Isolated", not inverted) ending with
//   ByteLevel, as Llama 3's. Patterns are matched as Oniguruma matches them (split_regex.hpp
//   in the sources lists what is supported).
// - decoder: ByteLevel. normalizer: none. post_processor: ignored (it only adds template
//   tokens such as a BOS, which encode() leaves out; plexus data prepare adds the
//   end-of-document token itself). truncation and padding: ignored (documents are encoded
//   whole).
// - added_tokens: matched whole in the text before pre-tokenization (the longest at the
//   leftmost position wins; those with normalized = false first), with the ids Hugging Face
//   gives them: a token in vocab keeps its id there, the others follow the vocabulary in order.
//   single_word, lstrip and rstrip must be false.
//
// Text need not be valid UTF-8: a byte that is not is split as one unassigned character and
// encoded as its byte token, so decode(encode(x)) == x for any bytes (Hugging Face's tokenizers
// takes only UTF-8 text). A vocabulary lacking some of the 256 byte tokens drops those bytes
// (or gives unk_token), as Hugging Face does; missing_bytes() says how many there are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plexus/core/data/tokenizer.hpp"

namespace plexus::data {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
};

class BpeTokenizer final : public Tokenizer {
 public:
  struct State;  // framework/src/data/bpe_state.hpp: built by the readers and the trainer

  // Reads a tokenizer.json. DataError naming the file and the field at fault.
  static BpeTokenizer load(const std::filesystem::path& file);
  // The same from the file's text; `source` names it in errors.
  static BpeTokenizer from_json(std::string_view json, const std::string& source);

  explicit BpeTokenizer(std::shared_ptr<State> state);

  std::string_view kind() const noexcept override { return "bpe"; }
  int64_t vocab_size() const noexcept override;
  bool has_token(int32_t id) const noexcept override;
  // The first special added token named like an end of text or document: <|endoftext|>
  // (GPT-2), <|end_of_text|> (Llama 3), </s>, <eos>, <|eot|>.
  std::optional<int32_t> end_of_document() const noexcept override;
  // "bpe:xxh64:..." of the vocabulary, merges, added tokens, pre-tokenizer and model flags
  // (tokenizer_fingerprint.cpp): not of the file's text, so layout, key order, the merges'
  // spelling and the fields Plexus ignores do not change it.
  std::string fingerprint() const override;

  using Tokenizer::encode;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> tokens) const override;

  // The pieces encode() hands to the BPE model (raw bytes; added tokens whole, flagged): what
  // `plexus tokenizer encode --pieces` shows.
  struct Piece {
    std::string bytes;
    bool added = false;
  };
  std::vector<Piece> pieces(std::string_view text) const;

  // The id of a token: an added token's content, or a vocab entry as written in the file
  // (byte-level characters, e.g. "Ġthe").
  std::optional<int32_t> token_id(std::string_view token) const;
  // The token of an id as written in the file, or nullopt.
  std::optional<std::string> token_string(int32_t id) const;

  std::size_t vocab_entries() const noexcept;  // model.vocab
  std::size_t merge_count() const noexcept;
  const std::vector<AddedToken>& added_tokens() const noexcept;
  std::size_t missing_bytes() const noexcept;  // byte tokens model.vocab lacks (0 of 256 normally)
  std::string pre_tokenizer_summary() const;   // e.g. "ByteLevel (GPT-2 regex, no prefix space)"

  // tokenizer.json text that Hugging Face's tokenizers and load() read back to the same
  // tokenizer: model BPE with the vocab by id and the merges as "a b" strings (what every
  // tokenizers release reads), the pre-tokenizer, decoder ByteLevel, the added tokens.
  std::string to_json() const;

 private:
  std::shared_ptr<State> state_;
};

// Bytes in GPT-2's byte-level characters (space as "Ġ", newline as "Ċ"): how tokenizer.json
// writes tokens and Hugging Face shows pre-tokenized pieces.
std::string byte_level_text(std::string_view bytes);

}  // namespace plexus::data

// Tokenizers: text <-> token ids. Two kinds: the byte tokenizer below (the default: nothing
// to configure) and byte-level BPE read from a Hugging Face tokenizer.json (bpe_tokenizer.hpp).
// open_tokenizer() gives either from a path, as data.tokenizer and the tools name them.
//
// The byte-level tokenizer: one token per byte, token id = byte value, vocabulary 256.
// It needs no vocabulary file, round-trips any input exactly (UTF-8 or not) and is what
// `plexus data prepare` writes without --tokenizer. There is deliberately no end-of-document
// token: the vocabulary stays exactly 256 so every token is a byte and decode(encode(x)) == x
// for every x. Documents in such a dataset are therefore separated by nothing; the sampler
// concatenates them as one stream (see sampler.hpp), so a window may span the end of one
// document and the start of the next, as in GPT pretraining without EOS.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "byte" or "bpe".
  virtual std::string_view kind() const noexcept = 0;
  // One more than the largest token id: a model needs at least this many embedding rows.
  virtual int64_t vocab_size() const noexcept = 0;
  virtual bool has_token(int32_t id) const noexcept = 0;
  // The token a prepared document ends with, if the tokenizer has one.
  virtual std::optional<int32_t> end_of_document() const noexcept = 0;
  // What identifies the tokenizer's encoding, so that two tokenizers that encode differently
  // never share it: "byte" for the byte tokenizer, "bpe:xxh64:<16 hex digits>" for a BPE
  // (tokenizer_fingerprint.hpp says what is hashed). `plexus data prepare` records it beside the
  // dataset; plexus-train compares it with data.tokenizer's.
  virtual std::string fingerprint() const = 0;

  virtual void encode_append(std::string_view text, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const;

  // The bytes the tokens stand for, whatever they are (invalid UTF-8, NUL, control
  // characters): making them printable is the caller's business. An id the tokenizer has no
  // token for is a DataError naming it and its position.
  virtual std::string decode(std::span<const int32_t> tokens) const = 0;

  // decode() for showing a model's output, which may hold ids the tokenizer lacks (a model's
  // vocabulary is often padded beyond the tokenizer's): each such id is shown as "<|id N|>".
  // Never throws for an id.
  std::string decode_for_display(std::span<const int32_t> tokens) const;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kVocabSize = 256;
  std::string_view kind() const noexcept override { return "byte"; }
  int64_t vocab_size() const noexcept override { return kVocabSize; }
  bool has_token(int32_t id) const noexcept override { return id >= 0 && id < kVocabSize; }
  std::optional<int32_t> end_of_document() const noexcept override { return std::nullopt; }
  std::string fingerprint() const override { return "byte"; }

  using Tokenizer::encode;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const override;

  // A token outside 0..255 is not a byte: DataError naming the token and its position.
  std::string decode(std::span<const int32_t> tokens) const override;
  std::string decode(std::span<const int64_t> tokens) const;
};

// The tokenizer of a data.tokenizer / --tokenizer value: a tokenizer.json file, or the byte
// tokenizer for an empty path. A file that cannot be read or used is a DataError naming it
// and, for a bad field, the field (bpe_tokenizer.hpp).
std::unique_ptr<Tokenizer> open_tokenizer(const std::filesystem::path& file);

}  // namespace plexus::data

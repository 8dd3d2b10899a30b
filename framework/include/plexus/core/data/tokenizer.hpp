// The byte-level tokenizer: one token per byte, token id = byte value, vocabulary 256.
//
// It needs no vocabulary file, round-trips any input exactly (UTF-8 or not) and is what
// `plexus data prepare` writes. There is deliberately no end-of-document token: the
// vocabulary stays exactly 256 so every token is a byte and decode(encode(x)) == x for every
// x. Documents in a prepared dataset are therefore separated by nothing; the sampler
// concatenates them as one stream (see sampler.hpp), so a window may span the end of one
// document and the start of the next, as in GPT pretraining without EOS.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::data {

class ByteTokenizer {
 public:
  static constexpr int32_t kVocabSize = 256;
  int32_t vocab_size() const noexcept { return kVocabSize; }

  std::vector<int32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;

  // The raw bytes the tokens stand for, whatever they are (invalid UTF-8, NUL, control
  // characters): making them printable is the caller's business. A token outside 0..255 is
  // not a byte: DataError naming the token and its position.
  std::string decode(std::span<const int32_t> tokens) const;
  std::string decode(std::span<const int64_t> tokens) const;
};

}  // namespace plexus::data

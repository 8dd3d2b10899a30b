// ByteTokenizer: token id = byte value.
#include <string>

#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/data/tokenizer.hpp"

namespace plexus::data {
namespace {

template <typename T>
std::string decode_bytes(std::span<const T> tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto token = static_cast<int64_t>(tokens[i]);
    if (token < 0 || token > 255)
      throw DataError("", "byte tokenizer: token " + std::to_string(token) + " at position " + std::to_string(i) +
                              " is not a byte (the vocabulary is 0..255); the data was made with another tokenizer");
    text.push_back(static_cast<char>(static_cast<unsigned char>(token)));
  }
  return text;
}

}  // namespace

void ByteTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  out.reserve(out.size() + text.size());
  for (const char c : text) out.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
}

std::string ByteTokenizer::decode(std::span<const int32_t> tokens) const { return decode_bytes(tokens); }
std::string ByteTokenizer::decode(std::span<const int64_t> tokens) const { return decode_bytes(tokens); }

}  // namespace plexus::data

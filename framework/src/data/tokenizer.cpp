// What every tokenizer shares, and choosing one by path.
#include "plexus/core/data/tokenizer.hpp"
#include "plexus/core/data/bpe_tokenizer.hpp"

namespace plexus::data {

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens;
  encode_append(text, tokens);
  return tokens;
}

std::string Tokenizer::decode_for_display(std::span<const int32_t> tokens) const {
  std::string text;
  std::size_t run = 0;  // the start of the current run of known ids
  for (std::size_t i = 0; i <= tokens.size(); ++i) {
    if (i < tokens.size() && has_token(tokens[i])) continue;
    if (i > run) text += decode(tokens.subspan(run, i - run));
    if (i < tokens.size()) text += "<|id " + std::to_string(tokens[i]) + "|>";
    run = i + 1;
  }
  return text;
}

std::unique_ptr<Tokenizer> open_tokenizer(const std::filesystem::path& file) {
  if (file.empty()) return std::make_unique<ByteTokenizer>();
  return std::make_unique<BpeTokenizer>(BpeTokenizer::load(file));
}

}  // namespace plexus::data

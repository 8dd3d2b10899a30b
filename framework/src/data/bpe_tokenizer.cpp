// BpeTokenizer: loading, decoding and what it tells about itself.
#include "data/byte_level.hpp"
#include "data/tokenizer_json.hpp"
#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/regular_file.hpp"

namespace plexus::data {

BpeTokenizer::BpeTokenizer(std::shared_ptr<State> state) : state_(std::move(state)) {}

BpeTokenizer BpeTokenizer::load(const std::filesystem::path& file) {
  const std::string name = file.string();
  std::string text;
  try {
    text = read_regular_file(file);  // a FIFO is refused, never waited on
  } catch (const FileReadError& e) {
    const std::string problem = e.what();
    throw DataError(name, name + ": " + (problem == "no such file" ? "no such tokenizer file" : problem));
  }
  return from_json(text, name);
}

BpeTokenizer BpeTokenizer::from_json(std::string_view json, const std::string& source) {
  return BpeTokenizer(read_tokenizer_json(json, source));
}

int64_t BpeTokenizer::vocab_size() const noexcept {
  return state_->size;
}

bool BpeTokenizer::has_token(int32_t id) const noexcept {
  return id >= 0 && id < state_->size && state_->known[static_cast<std::size_t>(id)] != 0;
}

std::optional<int32_t> BpeTokenizer::end_of_document() const noexcept {
  return state_->end_of_document;
}

std::string BpeTokenizer::decode(std::span<const int32_t> tokens) const {
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (!has_token(tokens[i]))
      throw DataError("", "BPE tokenizer: token " + std::to_string(tokens[i]) + " at position " +
                              std::to_string(i) + " is not in the vocabulary (ids 0.." +
                              std::to_string(state_->size - 1) + ")");
    text += state_->decoded[static_cast<std::size_t>(tokens[i])];
  }
  return text;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& added : state_->added)
    if (added.content == token) return added.id;
  const auto it = state_->vocab_ids.find(std::string(token));
  if (it == state_->vocab_ids.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> BpeTokenizer::token_string(int32_t id) const {
  if (!has_token(id)) return std::nullopt;
  return state_->vocab[static_cast<std::size_t>(id)];
}

std::size_t BpeTokenizer::vocab_entries() const noexcept {
  return state_->vocab_ids.size();
}
std::size_t BpeTokenizer::merge_count() const noexcept {
  return state_->merges.size();
}
const std::vector<AddedToken>& BpeTokenizer::added_tokens() const noexcept {
  return state_->added;
}
std::size_t BpeTokenizer::missing_bytes() const noexcept {
  return state_->missing_bytes;
}

std::string BpeTokenizer::pre_tokenizer_summary() const {
  const PreTokenizerSpec& pre = state_->pre;
  std::string text;
  for (const SplitStep& step : pre.splits)
    text += std::string("Split (") + (step.is_regex ? "regex " : "string ") + step.pattern + "), then ";
  text += "ByteLevel (";
  text += pre.use_regex ? "GPT-2 split regex" : "no regex";
  text += pre.add_prefix_space ? ", prefix space)" : ", no prefix space)";
  return text;
}

std::string BpeTokenizer::to_json() const {
  return write_tokenizer_json(*state_);
}

std::string byte_level_text(std::string_view bytes) {
  return byte_level::to_token_string(bytes);
}

}  // namespace plexus::data

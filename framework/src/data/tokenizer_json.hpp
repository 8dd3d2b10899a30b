// Reading and writing Hugging Face's tokenizer.json (tokenizer_json_read*.cpp,
// tokenizer_json_write.cpp).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "data/bpe_state.hpp"

namespace plexus::data {

// The state of the tokenizer the text describes, built. DataError naming `source` and the
// field at fault.
std::shared_ptr<BpeTokenizer::State> read_tokenizer_json(std::string_view json, const std::string& source);

std::string write_tokenizer_json(const BpeTokenizer::State& state);

}  // namespace plexus::data

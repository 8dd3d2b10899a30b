// Writes a BpeTokenizer::State as tokenizer.json, laid out as Hugging Face's tokenizers saves
// one (one vocab entry and one merge per line), so that every tokenizers release reads it: the
// merges as "a b" strings unless a token holds a space (then as ["a", "b"] pairs, which
// tokenizers reads since 0.20).
#include <algorithm>

#include <boost/json.hpp>

#include "data/tokenizer_json.hpp"

namespace plexus::data {
namespace {

std::string json_quoted(const std::string& text) {
  return boost::json::serialize(boost::json::value(text));
}
const char* flag(bool value) {
  return value ? "true" : "false";
}

std::string byte_level(const PreTokenizerSpec& pre) {
  return std::string("{\"type\": \"ByteLevel\", \"add_prefix_space\": ") + flag(pre.add_prefix_space) +
         ", \"trim_offsets\": " + flag(pre.trim_offsets) + ", \"use_regex\": " + flag(pre.use_regex) + "}";
}

std::string pre_tokenizer(const PreTokenizerSpec& pre) {
  if (!pre.sequence) return byte_level(pre);
  std::string text = "{\n    \"type\": \"Sequence\",\n    \"pretokenizers\": [\n";
  for (const SplitStep& step : pre.splits)
    text += std::string("      {\"type\": \"Split\", \"pattern\": {\"") +
            (step.is_regex ? "Regex" : "String") + "\": " + json_quoted(step.pattern) +
            "}, \"behavior\": \"Isolated\", \"invert\": false},\n";
  return text + "      " + byte_level(pre) + "\n    ]\n  }";
}

}  // namespace

std::string write_tokenizer_json(const BpeTokenizer::State& s) {
  std::string out =
      "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  for (std::size_t i = 0; i < s.added.size(); ++i) {
    const AddedToken& t = s.added[i];
    out += std::string(i == 0 ? "\n" : ",\n") + "    {\"id\": " + std::to_string(t.id) +
           ", \"content\": " + json_quoted(t.content) +
           ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": " +
           flag(t.normalized) + ", \"special\": " + flag(t.special) + "}";
  }
  out += s.added.empty() ? "],\n" : "\n  ],\n";
  out += "  \"normalizer\": null,\n";
  out += "  \"pre_tokenizer\": " + pre_tokenizer(s.pre) + ",\n";
  out += "  \"post_processor\": null,\n";
  out +=
      "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
      "\"use_regex\": true},\n";
  out += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": ";
  out += s.unk_token ? json_quoted(*s.unk_token) : std::string("null");
  out += ",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n";
  out += std::string("    \"fuse_unk\": ") + flag(s.fuse_unk) +
         ",\n    \"byte_fallback\": " + flag(s.byte_fallback) + ",\n";
  // Written only when set: releases before 0.19 do not know the key.
  if (s.ignore_merges) out += "    \"ignore_merges\": true,\n";
  out += "    \"vocab\": {";
  bool first = true;
  for (std::size_t id = 0; id < s.in_vocab.size(); ++id) {
    if (!s.in_vocab[id]) continue;
    out +=
        std::string(first ? "\n" : ",\n") + "      " + json_quoted(s.vocab[id]) + ": " + std::to_string(id);
    first = false;
  }
  out += "\n    },\n    \"merges\": [";
  const bool pairs = std::any_of(s.merges.begin(), s.merges.end(), [&](const auto& merge) {
    return s.vocab[static_cast<std::size_t>(merge.first)].find(' ') != std::string::npos ||
           s.vocab[static_cast<std::size_t>(merge.second)].find(' ') != std::string::npos;
  });
  for (std::size_t i = 0; i < s.merges.size(); ++i) {
    const std::string& a = s.vocab[static_cast<std::size_t>(s.merges[i].first)];
    const std::string& b = s.vocab[static_cast<std::size_t>(s.merges[i].second)];
    out += i == 0 ? "\n      " : ",\n      ";
    out += pairs ? '[' + json_quoted(a) + ", " + json_quoted(b) + ']' : json_quoted(a + ' ' + b);
  }
  out += s.merges.empty() ? "]\n  }\n}\n" : "\n    ]\n  }\n}\n";
  return out;
}

}  // namespace plexus::data

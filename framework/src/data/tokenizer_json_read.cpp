// Reads a Hugging Face tokenizer.json into a BpeTokenizer::State: the JSON itself, the model
// (vocab, merges, options) and the added tokens, with their ids checked against the ones
// Hugging Face's tokenizers gives them. The other sections: tokenizer_json_sections.cpp.
#include <unordered_map>

#include "data/tokenizer_json.hpp"
#include "data/tokenizer_json_fields.hpp"
#include "plexus/core/data/indexed_dataset.hpp"

namespace plexus::data {
namespace {

boost::json::value parse_json(std::string_view json, const std::string& source) {
  boost::json::stream_parser parser;
  boost::system::error_code ec;
  const std::size_t consumed = parser.write_some(json.data(), json.size(), ec);
  if (!ec) parser.finish(ec);
  if (ec) {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < consumed && i < json.size(); ++i) {
      if (json[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw DataError(source, source + ": not valid JSON (line " + std::to_string(line) + ", column " +
                                std::to_string(column) + "): " + ec.message());
  }
  return parser.release();
}

std::string json_quoted(const std::string& text) {
  return boost::json::serialize(boost::json::value(text));
}

void read_model(const JsonFields& f, const boost::json::object& root, BpeTokenizer::State& s) {
  const boost::json::object& model = f.object(f.require(root, "model", "tokenizer.json"), "model");
  const boost::json::value* type = JsonFields::find(model, "type");
  if (type != nullptr) {
    const std::string name = f.string(*type, "model.type");
    if (name != "BPE")
      f.fail("model.type",
             json_quoted(name) +
                 " is not supported: Plexus reads byte-level BPE tokenizers (model.type \"BPE\")");
  } else if (JsonFields::find(model, "merges") == nullptr) {
    f.fail("model", "missing field \"type\"");
  }
  if (const auto* dropout = JsonFields::find(model, "dropout");
      dropout != nullptr && !dropout->is_null() &&
      !(dropout->is_number() && dropout->to_number<double>() == 0.0))
    f.fail("model.dropout", JsonFields::show(*dropout) +
                                ": BPE dropout is not supported (it makes encoding random); "
                                "set it to null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!f.string_or_empty(model, key, "model").empty())
      f.fail(std::string("model.") + key, "not supported for byte-level BPE (expected null)");
  const std::string unk = f.string_or_empty(model, "unk_token", "model");
  if (!unk.empty()) s.unk_token = unk;
  s.fuse_unk = f.boolean_or(model, "fuse_unk", "model", false);
  s.byte_fallback = f.boolean_or(model, "byte_fallback", "model", false);
  s.ignore_merges = f.boolean_or(model, "ignore_merges", "model", false);

  // vocab: token string -> id, the ids 0..N-1 each once (Hugging Face numbers added tokens
  // from N, the entry count).
  const boost::json::object& vocab = f.object(f.require(model, "vocab", "model"), "model.vocab");
  if (vocab.empty()) f.fail("model.vocab", "empty");
  s.vocab.assign(vocab.size(), std::string());
  s.in_vocab.assign(vocab.size(), 0);
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(vocab.size());
  for (const auto& entry : vocab) {
    const std::string token(entry.key());
    const std::string path = "model.vocab[" + json_quoted(token) + "]";
    const int32_t id = f.id(entry.value(), path);
    if (static_cast<std::size_t>(id) >= vocab.size())
      f.fail(path, "id " + std::to_string(id) + " is out of range: the " + std::to_string(vocab.size()) +
                       " entries must have the ids 0.." + std::to_string(vocab.size() - 1));
    if (s.in_vocab[static_cast<std::size_t>(id)])
      f.fail(path, "id " + std::to_string(id) + " is also the id of " +
                       json_quoted(s.vocab[static_cast<std::size_t>(id)]));
    s.vocab[static_cast<std::size_t>(id)] = token;
    s.in_vocab[static_cast<std::size_t>(id)] = 1;
    ids.emplace(token, id);
  }

  // merges: "a b" strings (a single space between the parts) or ["a", "b"] pairs.
  const boost::json::array& merges = f.array(f.require(model, "merges", "model"), "model.merges");
  s.merges.reserve(merges.size());
  std::unordered_map<uint64_t, std::size_t> seen;
  seen.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string path = "model.merges[" + std::to_string(i) + "]";
    std::string parts[2];
    if (merges[i].is_string()) {
      const std::string line(merges[i].get_string());
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        f.fail(path, "expected two tokens separated by one space, got " + json_quoted(line));
      parts[0] = line.substr(0, space);
      parts[1] = line.substr(space + 1);
    } else if (merges[i].is_array() && merges[i].get_array().size() == 2) {
      s.merges_as_pairs = true;
      for (std::size_t k = 0; k < 2; ++k)
        parts[k] = f.string(merges[i].get_array()[k], path + "[" + std::to_string(k) + "]");
    } else {
      f.fail(path, "expected \"a b\" or [\"a\", \"b\"], got " + JsonFields::show(merges[i]));
    }
    int32_t part_ids[2];
    for (std::size_t k = 0; k < 2; ++k) {
      const auto it = ids.find(parts[k]);
      if (it == ids.end()) f.fail(path, "token " + json_quoted(parts[k]) + " is not in model.vocab");
      part_ids[k] = it->second;
    }
    if (ids.find(parts[0] + parts[1]) == ids.end())
      f.fail(path, "the merged token " + json_quoted(parts[0] + parts[1]) + " is not in model.vocab");
    const auto [previous, fresh] = seen.emplace(BpeTokenizer::State::pair_key(part_ids[0], part_ids[1]), i);
    if (!fresh) f.fail(path, "the same merge as model.merges[" + std::to_string(previous->second) + "]");
    s.merges.emplace_back(part_ids[0], part_ids[1]);
  }
  if (s.unk_token && ids.find(*s.unk_token) == ids.end())
    f.fail("model.unk_token", json_quoted(*s.unk_token) + " is not in model.vocab");
}

void read_added_tokens(const JsonFields& f, const boost::json::object& root, BpeTokenizer::State& s) {
  const boost::json::value* value = JsonFields::find(root, "added_tokens");
  if (value == nullptr || value->is_null()) return;
  const boost::json::array& tokens = f.array(*value, "added_tokens");
  std::unordered_map<std::string, std::size_t> seen;
  std::unordered_map<std::string, int32_t> vocab_ids;
  for (std::size_t id = 0; id < s.vocab.size(); ++id)
    vocab_ids.emplace(s.vocab[id], static_cast<int32_t>(id));
  auto next_id = static_cast<int32_t>(s.vocab.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    const boost::json::object& o = f.object(tokens[i], path);
    AddedToken token;
    token.id = f.id(f.require(o, "id", path), path + ".id");
    token.content = f.string(f.require(o, "content", path), path + ".content");
    if (token.content.empty()) f.fail(path + ".content", "empty");
    token.special = f.boolean_or(o, "special", path, false);
    token.normalized = f.boolean_or(o, "normalized", path, !token.special);
    for (const char* flag : {"single_word", "lstrip", "rstrip"})
      if (f.boolean_or(o, flag, path, false)) f.fail(path + "." + flag, "true is not supported");
    const auto [previous, fresh] = seen.emplace(token.content, i);
    if (!fresh)
      f.fail(path,
             json_quoted(token.content) + " is also added_tokens[" + std::to_string(previous->second) + "]");
    // Hugging Face's ids: a token in vocab keeps its vocab id; the others follow the
    // vocabulary in the order listed.
    const auto in_vocab = vocab_ids.find(token.content);
    const int32_t expected = in_vocab != vocab_ids.end() ? in_vocab->second : next_id++;
    if (token.id != expected)
      f.fail(path + ".id",
             std::to_string(token.id) + ", but Hugging Face's tokenizers gives " +
                 json_quoted(token.content) + " the id " + std::to_string(expected) +
                 (in_vocab != vocab_ids.end() ? " (its model.vocab id)"
                                              : " (added tokens not in model.vocab follow it in order)"));
    s.added.push_back(std::move(token));
  }
}

}  // namespace

std::shared_ptr<BpeTokenizer::State> read_tokenizer_json(std::string_view json, const std::string& source) {
  const boost::json::value document = parse_json(json, source);
  const JsonFields f(source);
  const boost::json::object& root = f.object(document, "tokenizer.json");
  auto state = std::make_shared<BpeTokenizer::State>();
  read_model(f, root, *state);
  read_added_tokens(f, root, *state);
  read_normalizer(f, JsonFields::find(root, "normalizer"));
  read_pre_tokenizer(f, JsonFields::find(root, "pre_tokenizer"), state->pre);
  read_decoder(f, JsonFields::find(root, "decoder"));
  state->build(source);
  return state;
}

}  // namespace plexus::data

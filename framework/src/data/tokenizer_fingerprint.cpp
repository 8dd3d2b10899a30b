// Tokenizer fingerprints and the record beside a dataset (tokenizer_fingerprint.hpp).
//
// What a BPE's fingerprint hashes: a canonical text of what decides its ids, built here from the
// tokenizer as read (not the file's text, whose layout, key order and ignored fields vary between
// writers of the same tokenizer): every vocabulary entry (id and token), the merges in rank order
// (by the ids of their parts), the added tokens (id, content, special, normalized), the
// pre-tokenizer (its splits and ByteLevel's flags) and the model's flags (unk_token, fuse_unk,
// ignore_merges, byte_fallback). Strings are hex-encoded, so no token can be mistaken for a
// separator. The text starts with its version: a later Plexus that hashes more says so in it.
#include "plexus/core/data/tokenizer_fingerprint.hpp"

#include <boost/json.hpp>

#include "data/bpe_state.hpp"
#include "plexus/core/data/bpe_tokenizer.hpp"
#include "plexus/core/regular_file.hpp"
#include "plexus/core/xxhash64.hpp"

namespace plexus::data {
namespace {

constexpr const char* kFormat = "plexus-tokenizer-fingerprint-1";

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    text += kDigits[b >> 4U];
    text += kDigits[b & 15U];
  }
  return text;
}

char flag(bool value) {
  return value ? '1' : '0';
}

// "the BPE tokenizer tok.json (8192 tokens, bpe:xxh64:...)", "the byte tokenizer (byte)".
std::string describe(const std::string& file, const std::string& fingerprint, std::int64_t vocab) {
  if (file.empty()) return "the byte tokenizer (" + fingerprint + ")";
  return file + " (" + std::to_string(vocab) + " tokens, " + fingerprint + ")";
}

}  // namespace

std::string BpeTokenizer::fingerprint() const {
  const State& s = *state_;
  std::string text = std::string(kFormat) + "\nbpe\n";
  text += "vocab\n";
  for (std::size_t id = 0; id < s.in_vocab.size(); ++id)
    if (s.in_vocab[id]) text += std::to_string(id) + ' ' + hex(s.vocab[id]) + '\n';
  text += "merges\n";
  for (const auto& [a, b] : s.merges) text += std::to_string(a) + ' ' + std::to_string(b) + '\n';
  text += "added\n";
  for (const AddedToken& t : s.added)
    text += std::to_string(t.id) + ' ' + flag(t.special) + flag(t.normalized) + ' ' + hex(t.content) + '\n';
  text += std::string("pre ") + flag(s.pre.sequence) + flag(s.pre.add_prefix_space) + flag(s.pre.use_regex) +
          '\n';
  for (const SplitStep& step : s.pre.splits)
    text += std::string("split ") + flag(step.is_regex) + ' ' + hex(step.pattern) + '\n';
  text += "unk " + (s.unk_token ? hex(*s.unk_token) : std::string("-")) + '\n';
  text += std::string("flags ") + flag(s.fuse_unk) + flag(s.ignore_merges) + flag(s.byte_fallback) + '\n';
  return "bpe:xxh64:" + hex64(xxh64(text));
}

std::filesystem::path fingerprint_path(const std::filesystem::path& prefix) {
  std::filesystem::path path = prefix;
  path += ".tokenizer-fingerprint.json";
  return path;
}

std::string fingerprint_record(const Tokenizer& tokenizer, const std::string& tokenizer_file,
                               std::span<const std::byte> idx_bytes) {
  const std::optional<int32_t> eod = tokenizer.end_of_document();
  const boost::json::object record{
      {"format", kFormat},
      {"fingerprint", tokenizer.fingerprint()},
      {"vocab_size", tokenizer.vocab_size()},
      {"tokenizer", tokenizer_file},
      {"end_of_document", eod ? boost::json::value(*eod) : boost::json::value(nullptr)},
      {"idx_xxh64", hex64(xxh64(idx_bytes))}};
  return boost::json::serialize(record) + "\n";
}

FingerprintCheck check_tokenizer_fingerprint(const IndexedDataset& dataset, const Tokenizer& tokenizer,
                                             const std::string& tokenizer_file) {
  const std::filesystem::path record_path = fingerprint_path(dataset.prefix());
  const std::string record_name = record_path.string();
  const std::string given = describe(tokenizer_file, tokenizer.fingerprint(), tokenizer.vocab_size());
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(record_path, ec)))
    return {FingerprintCheck::Outcome::absent,
            dataset.prefix().string() + " has no " + record_path.filename().string() +
                " (prepared before Plexus recorded the tokenizer, or by another tool such as Megatron's "
                "preprocess_data.py): cannot check that data.tokenizer = " +
                given + " is the tokenizer it was prepared with"};
  std::string text;
  try {
    text = read_regular_file(record_path);
  } catch (const FileReadError& e) {
    throw DataError(record_name, record_name + ": " + e.what());
  }
  boost::system::error_code parse_error;
  const boost::json::value parsed = boost::json::parse(text, parse_error);
  const boost::json::object* record = parsed.if_object();
  const auto string_field = [&](const char* key) -> const boost::json::string* {
    const boost::json::value* v = record != nullptr ? record->if_contains(key) : nullptr;
    return v != nullptr ? v->if_string() : nullptr;
  };
  const boost::json::string* fingerprint = string_field("fingerprint");
  const boost::json::string* idx_sum = string_field("idx_xxh64");
  const boost::json::string* recorded_file = string_field("tokenizer");
  if (parse_error || fingerprint == nullptr || idx_sum == nullptr || recorded_file == nullptr)
    throw DataError(record_name,
                    record_name +
                        ": not a tokenizer fingerprint record (expected JSON with \"fingerprint\", "
                        "\"tokenizer\" and \"idx_xxh64\"): delete it, or prepare the dataset again");
  if (*idx_sum != hex64(xxh64(dataset.index_bytes())))
    return {FingerprintCheck::Outcome::stale, record_name + " describes another " +
                                                  idx_path(dataset.prefix()).filename().string() +
                                                  " than the one there now (the dataset was written again "
                                                  "since, by another tool): cannot check that "
                                                  "data.tokenizer = " +
                                                  given + " is the tokenizer it was prepared with"};
  if (*fingerprint == tokenizer.fingerprint()) return {FingerprintCheck::Outcome::matches, ""};
  const boost::json::value* vocab = record->if_contains("vocab_size");
  const std::int64_t recorded_vocab = vocab != nullptr && vocab->is_int64() ? vocab->as_int64() : -1;
  std::error_code sidecar_ec;
  std::filesystem::path copy = dataset.prefix();
  copy += ".tokenizer.json";
  const std::string hint = std::filesystem::is_regular_file(copy, sidecar_ec) && recorded_file->size() > 0
                               ? " (" + copy.string() + ", beside it, is a copy of that tokenizer)"
                               : "";
  const std::string target = tokenizer_file.empty()
                                 ? std::string("the byte tokenizer (data.tokenizer is empty)")
                                 : "data.tokenizer = " + given;
  throw DataError(tokenizer_file.empty() ? record_name : tokenizer_file,
                  target + " is not the tokenizer " + dataset.prefix().string() +
                      " was prepared with: " + record_name + " records " +
                      describe(std::string(*recorded_file), std::string(*fingerprint), recorded_vocab) +
                      hint +
                      ". Its token ids would be read as another tokenizer's: set data.tokenizer to the "
                      "tokenizer the dataset was prepared with, or prepare the dataset again with this one");
}

}  // namespace plexus::data

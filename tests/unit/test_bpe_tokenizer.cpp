// Byte-level BPE: the byte alphabet, merges in rank order, added tokens, unk handling, exact
// round trips, the BPE trainer against a recount-every-merge reference, and tokenizer.json
// files refused field by field (also under fuzzing). Expected ids that come from Hugging Face's
// tokenizers (0.22.2) say so; the interop suite checks many more against the live library.
#define BOOST_TEST_MODULE bpe_tokenizer
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "plexus/core/data/bpe_tokenizer.hpp"
#include "plexus/core/data/bpe_trainer.hpp"
#include "plexus/core/data/indexed_dataset.hpp"

namespace json = boost::json;
using plexus::DataError;
using plexus::data::BpeTokenizer;
using plexus::data::BpeTrainer;
using plexus::data::byte_level_text;
using Ids = std::vector<int32_t>;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

json::object byte_level_pre(bool add_prefix_space = false) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", true},
          {"use_regex", true}};
}

json::object added_token(int id, const std::string& content, bool special, bool normalized) {
  return {{"id", id},        {"content", content},       {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

// A tokenizer.json: the 256 byte tokens (id = byte value) less `without`, then `extra`, the
// merges ("a b" in byte-level characters) and the added tokens.
json::object tokenizer_json(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                            json::array added = {}, const std::set<int>& without = {}) {
  json::object vocab;
  int id = 0;
  for (int b = 0; b < 256; ++b)
    if (without.count(b) == 0) vocab[byte_level_text(std::string(1, static_cast<char>(b)))] = id++;
  for (const std::string& token : extra) vocab[token] = id++;
  json::array merge_list;
  for (const std::string& merge : merges) merge_list.emplace_back(merge);
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", std::move(added)},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level_pre()},
          {"post_processor", nullptr},
          {"decoder",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", std::move(vocab)},
            {"merges", std::move(merge_list)}}}};
}

BpeTokenizer load(const json::object& doc) {
  return BpeTokenizer::from_json(json::serialize(doc), "test.json");
}

int32_t id_of(const BpeTokenizer& t, const std::string& token) {
  const auto id = t.token_id(token);
  BOOST_TEST_REQUIRE(id.has_value(), "no token " << token);
  return *id;
}

// Random text: code points from a mix of scripts, spaces, digits, emoji; or arbitrary bytes.
std::string random_utf8(std::mt19937& rng, std::size_t length) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},     {0x20, 0x20},     {0x0A, 0x0A},       {0xA0, 0x24F},
      {0x370, 0x3FF},   {0x400, 0x4FF},   {0x600, 0x66F},     {0x3040, 0x30FF},
      {0x4E00, 0x4FFF}, {0xAC00, 0xACFF}, {0x1F300, 0x1F64F}, {0x2000, 0x206F}};
  std::string text;
  for (std::size_t i = 0; i < length; ++i) {
    const auto& [lo, hi] = ranges[rng() % ranges.size()];
    const char32_t cp = lo + static_cast<char32_t>(rng() % (hi - lo + 1));
    if (cp < 0x80) {
      text += static_cast<char>(cp);
    } else if (cp < 0x800) {
      text += static_cast<char>(0xC0 | (cp >> 6));
      text += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      text += static_cast<char>(0xE0 | (cp >> 12));
      text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      text += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      text += static_cast<char>(0xF0 | (cp >> 18));
      text += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      text += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return text;
}

std::string random_bytes(std::mt19937& rng, std::size_t length) {
  std::string bytes;
  for (std::size_t i = 0; i < length; ++i) bytes += static_cast<char>(rng() % 256);
  return bytes;
}

// A trained tokenizer over varied text, shared by the round-trip cases.
const BpeTokenizer& trained() {
  static const BpeTokenizer tokenizer = [] {
    BpeTrainer trainer({700, 2, {"<|endoftext|>"}});
    std::mt19937 rng(7);
    for (int i = 0; i < 300; ++i) {
      trainer.add_text("The quick brown fox jumps over the lazy dog " + std::to_string(i) +
                       ". It's fine, isn't it?\n");
      trainer.add_text(random_utf8(rng, 40));
    }
    return trainer.train();
  }();
  return tokenizer;
}

}  // namespace

// ---- the byte-level alphabet -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(byte_level_alphabet_is_gpt2s_256_characters) {
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) seen.insert(byte_level_text(std::string(1, static_cast<char>(b))));
  BOOST_TEST(seen.size() == 256u);
  BOOST_TEST(byte_level_text(" ") == "\u0120");   // Ġ
  BOOST_TEST(byte_level_text("\n") == "\u010A");  // Ċ
  BOOST_TEST(byte_level_text(std::string(1, '\0')) == "\u0100");
  BOOST_TEST(byte_level_text("!~") == "!~");  // printable ASCII stands for itself
  BOOST_TEST(byte_level_text("\x7F") == "\u0121");
  BOOST_TEST(byte_level_text("\xA0") == "\u0142");
  BOOST_TEST(byte_level_text("\xA1\xAC\xAE\xFF") == "\u00A1\u00AC\u00AE\u00FF");
  BOOST_TEST(byte_level_text("\xAD") == "\u0143");  // soft hyphen, the last remapped byte
}

// ---- encoding ---------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(merges_apply_in_rank_order_not_text_order) {
  // "abc": with (b c) ranked first the result is a + bc; with (a b) first, ab + c.
  const BpeTokenizer bc_first = load(tokenizer_json({"bc", "ab"}, {"b c", "a b"}));
  BOOST_TEST(bc_first.encode("abc") == (Ids{'a', id_of(bc_first, "bc")}), boost::test_tools::per_element());
  const BpeTokenizer ab_first = load(tokenizer_json({"ab", "bc"}, {"a b", "b c"}));
  BOOST_TEST(ab_first.encode("abc") == (Ids{id_of(ab_first, "ab"), 'c'}), boost::test_tools::per_element());
  // A merge creates a pair a later rank merges: a b -> ab, ab c -> abc.
  const BpeTokenizer chain = load(tokenizer_json({"ab", "abc"}, {"a b", "ab c"}));
  BOOST_TEST(chain.encode("abcab") == (Ids{id_of(chain, "abc"), id_of(chain, "ab")}),
             boost::test_tools::per_element());
  // Equal ranks: leftmost first, so "aaa" is aa + a.
  const BpeTokenizer aa = load(tokenizer_json({"aa"}, {"a a"}));
  BOOST_TEST(aa.encode("aaa") == (Ids{id_of(aa, "aa"), 'a'}), boost::test_tools::per_element());
  // Words never merge across the pre-tokenizer's pieces: " a" is one word, "a" another.
  const BpeTokenizer space = load(tokenizer_json({"\u0120a", "aa"}, {"\u0120 a", "a a"}));
  BOOST_TEST(space.encode("aa aa") == (Ids{id_of(space, "aa"), id_of(space, "\u0120a"), 'a'}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(merges_read_as_strings_or_pairs_give_the_same_ids) {
  json::object pairs = tokenizer_json({"ab", "abc"}, {});
  pairs["model"].as_object()["merges"] = json::array{json::array{"a", "b"}, json::array{"ab", "c"}};
  const BpeTokenizer from_pairs = load(pairs);
  const BpeTokenizer from_strings = load(tokenizer_json({"ab", "abc"}, {"a b", "ab c"}));
  BOOST_TEST(from_pairs.merge_count() == 2u);
  BOOST_TEST(from_pairs.encode("xabcab") == from_strings.encode("xabcab"), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(ignore_merges_takes_a_word_that_is_a_token_whole) {
  // Llama 3 sets ignore_merges: "abc" is in vocab, so it is one token although no merge makes it.
  json::object doc = tokenizer_json({"ab", "abc"}, {"a b"});
  BOOST_TEST(load(doc).encode("abc") == (Ids{id_of(load(doc), "ab"), 'c'}), boost::test_tools::per_element());
  doc["model"].as_object()["ignore_merges"] = true;
  const BpeTokenizer ignoring = load(doc);
  BOOST_TEST(ignoring.encode("abc") == (Ids{id_of(ignoring, "abc")}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(added_tokens_are_matched_whole_leftmost_longest_unnormalized_first) {
  // Hugging Face's tokenizers: encode("x<a><b>y").ids == [120, 259, 98, 62, 121] for this file
  // ("<a><" is unnormalized, so it is matched before the longer, normalized "<a><b>").
  json::array added{added_token(257, "<a>", true, false), added_token(258, "<a><b>", false, true),
                    added_token(259, "<a><", false, false)};
  const BpeTokenizer t = load(tokenizer_json({"ab"}, {"a b"}, added));
  BOOST_TEST(t.vocab_size() == 260);
  BOOST_TEST(t.encode("x<a><b>y") == (Ids{120, 259, 98, 62, 121}), boost::test_tools::per_element());
  BOOST_TEST(t.encode("<a><b>") == (Ids{259, 98, 62}), boost::test_tools::per_element());
  BOOST_TEST(t.encode("ab<a>ab") == (Ids{256, 257, 256}), boost::test_tools::per_element());
  BOOST_TEST(t.decode(Ids{257, 256}) == "<a>ab");  // special tokens are decoded, not skipped

  // add_prefix_space applies to every piece between added tokens (tokenizers gives
  // Ġ x <a> Ġ y Ġ z Ċ <a> Ġ for "x<a>y z\n<a> ").
  json::object prefixed = tokenizer_json({"ab"}, {"a b"}, json::array{added_token(257, "<a>", true, false)});
  prefixed["pre_tokenizer"] = byte_level_pre(true);
  BOOST_TEST(load(prefixed).encode("x<a>y z\n<a> ") == (Ids{32, 120, 257, 32, 121, 32, 122, 10, 257, 32}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_end_of_document_token_is_found_by_name) {
  BOOST_TEST(!load(tokenizer_json({}, {})).end_of_document().has_value());
  const BpeTokenizer gpt2_like = load(
      tokenizer_json({"<|endoftext|>"}, {}, json::array{added_token(256, "<|endoftext|>", true, false)}));
  BOOST_TEST(gpt2_like.end_of_document().value_or(-1) == 256);
  const BpeTokenizer llama_like =
      load(tokenizer_json({}, {},
                          json::array{added_token(256, "<|begin_of_text|>", true, false),
                                      added_token(257, "<|end_of_text|>", true, false)}));
  BOOST_TEST(llama_like.end_of_document().value_or(-1) == 257);
}

BOOST_AUTO_TEST_CASE(bytes_without_a_token_are_dropped_or_become_unk_as_in_tokenizers) {
  // The vocabulary lacks 'c' (ids renumbered so they stay 0..N-1).
  json::object doc = tokenizer_json({"ab"}, {"a b"}, {}, {'c'});
  const BpeTokenizer dropping = load(doc);
  BOOST_TEST(dropping.missing_bytes() == 1u);
  const int32_t ab = id_of(dropping, "ab"), space = id_of(dropping, "\u0120");
  BOOST_TEST(dropping.encode("abc cc") == (Ids{ab, space}), boost::test_tools::per_element());
  doc["model"].as_object()["unk_token"] = "ab";
  BOOST_TEST(load(doc).encode("abc cc") == (Ids{ab, ab, space, ab, ab}), boost::test_tools::per_element());
  doc["model"].as_object()["fuse_unk"] = true;
  BOOST_TEST(load(doc).encode("abc cc") == (Ids{ab, ab, space, ab}), boost::test_tools::per_element());
}

// ---- decoding ---------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(decode_inverts_encode_on_random_utf8_and_random_bytes) {
  const BpeTokenizer& t = trained();
  BOOST_TEST(t.vocab_size() == 700);
  std::mt19937 rng(11);
  for (int i = 0; i < 400; ++i) {
    const std::string text = i % 2 == 0 ? random_utf8(rng, rng() % 80) : random_bytes(rng, rng() % 80);
    const Ids ids = t.encode(text);
    BOOST_TEST_REQUIRE(t.decode(ids) == text, "round trip " << i);
    for (const int32_t id : ids) BOOST_TEST_REQUIRE((id >= 0 && id < t.vocab_size()));
  }
  // Merges do compress: English text takes far fewer tokens than bytes.
  const std::string english = "The quick brown fox jumps over the lazy dog. It's fine, isn't it?";
  BOOST_TEST(t.encode(english).size() * 2 < english.size());
}

BOOST_AUTO_TEST_CASE(decode_refuses_unknown_ids_and_display_shows_them) {
  const BpeTokenizer& t = trained();
  BOOST_CHECK_EXCEPTION(t.decode(Ids{72, 700}), DataError, [](const DataError& e) {
    return contains(e.what(), "token 700 at position 1 is not in the vocabulary");
  });
  BOOST_TEST(t.decode_for_display(Ids{72, 700, -3, 105}) == "H<|id 700|><|id -3|>i");
  const plexus::data::ByteTokenizer bytes;
  BOOST_TEST(bytes.decode_for_display(Ids{104, 50256, 105}) == "h<|id 50256|>i");
}

BOOST_AUTO_TEST_CASE(to_json_reads_back_to_the_same_tokenizer) {
  const BpeTokenizer& t = trained();
  const BpeTokenizer again = BpeTokenizer::from_json(t.to_json(), "round-trip.json");
  BOOST_TEST(again.vocab_size() == t.vocab_size());
  BOOST_TEST(again.merge_count() == t.merge_count());
  BOOST_TEST(again.to_json() == t.to_json());
  std::mt19937 rng(3);
  for (int i = 0; i < 100; ++i) {
    const std::string text = random_utf8(rng, 60) + " <|endoftext|> " + random_utf8(rng, 10);
    BOOST_TEST_REQUIRE(again.encode(text) == t.encode(text));
  }
  BOOST_TEST(t.encode("a<|endoftext|>b").at(1) == 699);  // the special token, whole, last id
}

// ---- training ---------------------------------------------------------------------------------

namespace {

// The textbook trainer: recount every pair over every word before each merge.
std::vector<std::string> reference_merges(const std::map<std::string, int64_t>& words, int merges_wanted,
                                          int64_t min_frequency) {
  std::vector<std::pair<std::vector<std::string>, int64_t>> split;
  for (const auto& [word, count] : words) {
    std::vector<std::string> symbols;
    for (const char c : word) symbols.emplace_back(1, c);
    split.emplace_back(symbols, count);
  }
  std::map<std::string, int32_t> ids;  // token -> id, to break ties by the smaller pair of ids
  for (int b = 0; b < 256; ++b) ids[std::string(1, static_cast<char>(b))] = b;
  std::vector<std::string> merges;
  while (static_cast<int>(ids.size()) < 256 + merges_wanted) {
    std::map<std::pair<int32_t, int32_t>, int64_t> counts;
    for (const auto& [symbols, count] : split)
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i)
        counts[{ids[symbols[i]], ids[symbols[i + 1]]}] += count;
    std::pair<int32_t, int32_t> best{-1, -1};
    int64_t best_count = 0;
    for (const auto& [pair, count] : counts)
      if (count > best_count) best = pair, best_count = count;  // ascending pairs: the first of a tie wins
    if (best_count < min_frequency || best_count == 0) break;
    std::string a, b;
    for (const auto& [token, id] : ids) {
      if (id == best.first) a = token;
      if (id == best.second) b = token;
    }
    merges.push_back(a + " " + b);
    if (ids.count(a + b) == 0) {
      const auto next = static_cast<int32_t>(ids.size());
      ids[a + b] = next;
    }
    for (auto& [symbols, count] : split) {
      std::vector<std::string> out;
      for (std::size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
          out.push_back(a + b);
          ++i;
        } else {
          out.push_back(symbols[i]);
        }
      }
      symbols = out;
    }
  }
  return merges;
}

std::vector<std::string> merges_of(const BpeTokenizer& t) {
  std::vector<std::string> merges;
  const json::value doc = json::parse(t.to_json());
  for (const json::value& merge : doc.at("model").at("merges").as_array())
    merges.emplace_back(merge.as_string());
  return merges;
}

}  // namespace

BOOST_AUTO_TEST_CASE(training_with_incremental_counts_learns_the_recounting_trainers_merges) {
  std::mt19937 rng(5);
  for (int corpus = 0; corpus < 6; ++corpus) {
    // Words of a few letters (each text is one word to GPT-2's regex), with repeats, so that
    // counts tie, overlap ("aaaa") and change as merges go.
    std::map<std::string, int64_t> words;
    BpeTrainer trainer({256 + 60, 2, {}});
    for (int i = 0; i < 200; ++i) {
      std::string word;
      const std::size_t length = 1 + rng() % 9;
      for (std::size_t k = 0; k < length; ++k)
        word += static_cast<char>('a' + rng() % (corpus % 2 == 0 ? 3 : 5));
      const int repeats = 1 + static_cast<int>(rng() % 4);
      for (int r = 0; r < repeats; ++r) trainer.add_text(word);
      words[word] += repeats;
    }
    const std::vector<std::string> expected = reference_merges(words, 60, 2);
    BOOST_TEST(merges_of(trainer.train()) == expected, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(training_stops_below_min_frequency_and_refuses_bad_options) {
  BpeTrainer trainer({1000, 3, {"<|endoftext|>"}});
  trainer.add_text("abab abab xy");
  plexus::data::BpeTrainingSummary summary;
  const BpeTokenizer t = trainer.train(&summary);
  BOOST_TEST(contains(summary.stopped_because, "min frequency"), summary.stopped_because);
  BOOST_TEST(t.vocab_size() == 256 + static_cast<int64_t>(summary.merges) + 1);
  BOOST_TEST(t.end_of_document().value_or(-1) == static_cast<int32_t>(t.vocab_size() - 1));
  // Special tokens in the text are not learned from.
  BpeTrainer with_specials({300, 1, {"<|endoftext|>"}});
  for (int i = 0; i < 50; ++i) with_specials.add_text("<|endoftext|>");
  BOOST_CHECK_THROW(with_specials.train(), DataError);  // nothing but special tokens: no words
  BOOST_CHECK_EXCEPTION(BpeTrainer({257, 2, {"<a>", "<b>"}}), DataError,
                        [](const DataError& e) { return contains(e.what(), "need 258"); });
  BOOST_CHECK_EXCEPTION(BpeTrainer({300, 2, {"<a>", "<a>"}}), DataError,
                        [](const DataError& e) { return contains(e.what(), "given twice"); });
  BpeTrainer clash({300, 2, {"!"}});
  clash.add_text("hello");
  BOOST_CHECK_EXCEPTION(clash.train(), DataError, [](const DataError& e) {
    return contains(e.what(), "already a token of the vocabulary");
  });
}

// ---- refusals ---------------------------------------------------------------------------------

namespace {

struct Refusal {
  std::string name;
  std::function<void(json::object&)> damage;
  std::string expected;  // after "test.json: "
};

json::object& model_of(json::object& doc) {
  return doc["model"].as_object();
}

json::object split_sequence(json::value split) {
  json::array steps{std::move(split), byte_level_pre()};
  steps.back().as_object()["use_regex"] = false;
  return {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}};
}

json::object split_step(const std::string& pattern) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
}

}  // namespace

BOOST_AUTO_TEST_CASE(malformed_files_are_refused_naming_the_file_and_the_field) {
  const std::vector<Refusal> refusals = {
      {"root", [](json::object& d) { d.clear(); }, "tokenizer.json: missing field \"model\""},
      {"wordpiece", [](json::object& d) { model_of(d)["type"] = "WordPiece"; },
       "model.type: \"WordPiece\" is not supported: Plexus reads byte-level BPE"},
      {"unigram", [](json::object& d) { model_of(d)["type"] = "Unigram"; },
       "model.type: \"Unigram\" is not supported"},
      {"no type",
       [](json::object& d) {
         model_of(d).erase("type");
         model_of(d).erase("merges");
       },
       "model: missing field \"type\""},
      {"no vocab", [](json::object& d) { model_of(d).erase("vocab"); }, "model: missing field \"vocab\""},
      {"vocab array", [](json::object& d) { model_of(d)["vocab"] = json::array{}; },
       "model.vocab: expected an object"},
      {"empty vocab", [](json::object& d) { model_of(d)["vocab"] = json::object{}; }, "model.vocab: empty"},
      {"string id", [](json::object& d) { model_of(d)["vocab"].as_object()["a"] = "97"; },
       "model.vocab[\"a\"]: expected a token id"},
      {"negative id", [](json::object& d) { model_of(d)["vocab"].as_object()["a"] = -1; },
       "model.vocab[\"a\"]: expected a token id"},
      {"fraction id", [](json::object& d) { model_of(d)["vocab"].as_object()["a"] = 97.5; },
       "model.vocab[\"a\"]: expected a token id"},
      {"id gap", [](json::object& d) { model_of(d)["vocab"].as_object()["ab"] = 900; },
       "model.vocab[\"ab\"]: id 900 is out of range"},
      {"shared id", [](json::object& d) { model_of(d)["vocab"].as_object()["ab"] = 97; },
       "model.vocab[\"ab\"]: id 97 is also the id of \"a\""},
      {"merges object", [](json::object& d) { model_of(d)["merges"] = json::object{}; },
       "model.merges: expected an array"},
      {"three parts", [](json::object& d) { model_of(d)["merges"].as_array()[0] = "a b c"; },
       "model.merges[0]: expected two tokens separated by one space"},
      {"no space", [](json::object& d) { model_of(d)["merges"].as_array()[0] = "ab"; },
       "model.merges[0]: expected two tokens"},
      {"pair of three",
       [](json::object& d) {
         model_of(d)["merges"].as_array()[0] = json::array{"a", "b", "c"};
       },
       "model.merges[0]: expected \"a b\" or [\"a\", \"b\"]"},
      {"pair of numbers",
       [](json::object& d) {
         model_of(d)["merges"].as_array()[0] = json::array{1, 2};
       },
       "model.merges[0][0]: expected a string"},
      {"unknown part", [](json::object& d) { model_of(d)["merges"].as_array()[0] = "a zz"; },
       "model.merges[0]: token \"zz\" is not in model.vocab"},
      {"unknown result", [](json::object& d) { model_of(d)["merges"].as_array()[0] = "x y"; },
       "model.merges[0]: the merged token \"xy\" is not in model.vocab"},
      {"repeated merge", [](json::object& d) { model_of(d)["merges"].as_array().emplace_back("a b"); },
       "model.merges[1]: the same merge as model.merges[0]"},
      {"dropout", [](json::object& d) { model_of(d)["dropout"] = 0.1; },
       "model.dropout: 0.1: BPE dropout is not supported"},
      {"prefix", [](json::object& d) { model_of(d)["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix: not supported"},
      {"suffix", [](json::object& d) { model_of(d)["end_of_word_suffix"] = "</w>"; },
       "model.end_of_word_suffix"},
      {"unk", [](json::object& d) { model_of(d)["unk_token"] = "<unk>"; },
       "model.unk_token: \"<unk>\" is not in model.vocab"},
      {"fuse_unk", [](json::object& d) { model_of(d)["fuse_unk"] = "yes"; },
       "model.fuse_unk: expected true or false"},
      {"added not array", [](json::object& d) { d["added_tokens"] = json::object{}; },
       "added_tokens: expected an array"},
      {"added empty",
       [](json::object& d) { d["added_tokens"] = json::array{added_token(257, "", true, false)}; },
       "added_tokens[0].content: empty"},
      {"added id",
       [](json::object& d) { d["added_tokens"] = json::array{added_token(300, "<x>", true, false)}; },
       "added_tokens[0].id: 300, but Hugging Face's tokenizers gives \"<x>\" the id 257"},
      {"added vocab id",
       [](json::object& d) { d["added_tokens"] = json::array{added_token(5, "ab", true, false)}; },
       "added_tokens[0].id: 5, but Hugging Face's tokenizers gives \"ab\" the id 256 (its model.vocab id)"},
      {"added twice",
       [](json::object& d) {
         d["added_tokens"] =
             json::array{added_token(257, "<x>", true, false), added_token(258, "<x>", true, false)};
       },
       "added_tokens[1]: \"<x>\" is also added_tokens[0]"},
      {"lstrip",
       [](json::object& d) {
         auto token = added_token(257, "<x>", true, false);
         token["lstrip"] = true;
         d["added_tokens"] = json::array{token};
       },
       "added_tokens[0].lstrip: true is not supported"},
      {"added no id",
       [](json::object& d) {
         d["added_tokens"] = json::array{json::object{{"content", "<x>"}}};
       },
       "added_tokens[0]: missing field \"id\""},
      {"normalizer",
       [](json::object& d) {
         d["normalizer"] = {{"type", "NFC"}};
       },
       "normalizer: type \"NFC\" is not supported"},
      {"no pre_tokenizer", [](json::object& d) { d["pre_tokenizer"] = nullptr; }, "pre_tokenizer: missing"},
      {"metaspace",
       [](json::object& d) {
         d["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "pre_tokenizer.type: \"Metaspace\" is not supported"},
      {"prefix space missing",
       [](json::object& d) { d["pre_tokenizer"].as_object().erase("add_prefix_space"); },
       "pre_tokenizer: missing field \"add_prefix_space\""},
      {"use_regex type", [](json::object& d) { d["pre_tokenizer"].as_object()["use_regex"] = 1; },
       "pre_tokenizer.use_regex: expected true or false"},
      {"digits",
       [](json::object& d) {
         d["pre_tokenizer"] = split_sequence({{"type", "Digits"}});
       },
       "pre_tokenizer.pretokenizers[0].type: \"Digits\" is not supported"},
      {"no byte level",
       [](json::object& d) {
         d["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array{split_step("a")}}};
       },
       "pre_tokenizer.pretokenizers: no ByteLevel step"},
      {"byte level first",
       [](json::object& d) {
         d["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", json::array{byte_level_pre(), split_step("a")}}};
       },
       "pre_tokenizer.pretokenizers[1]: ByteLevel must be the last step"},
      {"behavior",
       [](json::object& d) {
         auto step = split_step("a");
         step["behavior"] = "Removed";
         d["pre_tokenizer"] = split_sequence(step);
       },
       "pre_tokenizer.pretokenizers[0].behavior: \"Removed\" is not supported"},
      {"invert",
       [](json::object& d) {
         auto step = split_step("a");
         step["invert"] = true;
         d["pre_tokenizer"] = split_sequence(step);
       },
       "pre_tokenizer.pretokenizers[0].invert: true is not supported"},
      {"lookbehind", [](json::object& d) { d["pre_tokenizer"] = split_sequence(split_step("(?<=a)b")); },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: unsupported pattern: lookbehind at offset 0"},
      {"pattern kind",
       [](json::object& d) {
         auto step = split_step("a");
         step["pattern"] = {{"Glob", "*"}};
         d["pre_tokenizer"] = split_sequence(step);
       },
       "pre_tokenizer.pretokenizers[0].pattern: expected {\"Regex\": ...} or {\"String\": ...}"},
      {"no decoder", [](json::object& d) { d.erase("decoder"); }, "decoder: missing"},
      {"wordpiece decoder",
       [](json::object& d) {
         d["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder.type: \"WordPiece\" is not supported"},
  };
  for (const Refusal& refusal : refusals) {
    json::object doc = tokenizer_json({"ab", "xy"}, {"a b"});
    doc["model"].as_object()["vocab"].as_object().erase("xy");  // "x y" would merge into nothing
    refusal.damage(doc);
    try {
      load(doc);
      BOOST_ERROR(refusal.name << ": loaded");
    } catch (const DataError& e) {
      BOOST_TEST(contains(e.what(), "test.json: " + refusal.expected), refusal.name << ": " << e.what());
      BOOST_TEST(e.file() == "test.json");
    }
  }
  BOOST_CHECK_EXCEPTION(
      BpeTokenizer::from_json("{\"model\": [1,", "cut.json"), DataError,
      [](const DataError& e) { return contains(e.what(), "cut.json: not valid JSON (line 1, column"); });
  BOOST_CHECK_EXCEPTION(BpeTokenizer::load("/nonexistent/tokenizer.json"), DataError, [](const DataError& e) {
    return contains(e.what(), "/nonexistent/tokenizer.json: no such tokenizer file");
  });
}

BOOST_AUTO_TEST_CASE(accepted_variants_load) {
  json::object untyped = tokenizer_json({"ab"}, {"a b"});
  model_of(untyped).erase("type");  // older files: a model with merges is BPE
  BOOST_TEST(load(untyped).merge_count() == 1u);
  json::object empty_normalizer = tokenizer_json({}, {});
  empty_normalizer["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array{}}};
  BOOST_TEST(load(empty_normalizer).vocab_size() == 256);
  json::object literal = tokenizer_json({}, {});
  literal["pre_tokenizer"] = split_sequence(
      {{"type", "Split"}, {"pattern", {{"String", "--"}}}, {"behavior", "Isolated"}, {"invert", false}});
  BOOST_TEST(load(literal).pieces("a--b").size() == 3u);
}

// ---- fuzzing the reader -----------------------------------------------------------------------

namespace {

// Every damaged file must load, and then round-trip text, or be refused with a DataError that
// names it; nothing else may happen (no other exception, no crash, no hang).
void check_damaged(const std::string& text, int& loaded, int& refused) {
  try {
    const BpeTokenizer t = BpeTokenizer::from_json(text, "fuzz.json");
    ++loaded;
    const std::string sample = "Hello, world! It's 42 \xC3\xA9t\xC3\xA9 \xE4\xB8\xAD <a> ab";
    const Ids ids = t.encode(sample);
    for (const int32_t id : ids) BOOST_TEST_REQUIRE(t.has_token(id));
    if (t.missing_bytes() == 0 && t.added_tokens().empty()) BOOST_TEST_REQUIRE(t.decode(ids) == sample);
  } catch (const DataError& e) {
    ++refused;
    BOOST_TEST_REQUIRE(contains(e.what(), "fuzz.json"), e.what());
  }
}

// A value of the document chosen at random: a path of keys and indices walked from the root.
json::value* random_node(json::value& root, std::mt19937& rng) {
  json::value* node = &root;
  while (rng() % 3 != 0) {
    if (node->is_object() && !node->get_object().empty()) {
      auto& o = node->get_object();
      node = &(o.begin() + static_cast<std::ptrdiff_t>(rng() % o.size()))->value();
    } else if (node->is_array() && !node->get_array().empty()) {
      auto& a = node->get_array();
      node = &a[rng() % a.size()];
    } else {
      break;
    }
  }
  return node;
}

}  // namespace

BOOST_AUTO_TEST_CASE(damaged_copies_load_consistently_or_are_refused_naming_the_file) {
  json::array added{added_token(259, "<a>", true, false)};
  json::object base = tokenizer_json({"ab", "abc", "\u0120a"}, {"a b", "ab c", "\u0120 a"}, added);
  base["pre_tokenizer"] =
      split_sequence(split_step(R"((?i:'s|'t)|\p{L}+|\p{N}{1,3}|\s+(?!\S)|\s+|[^\s\p{L}\p{N}]+)"));
  const std::string text = json::serialize(base);
  std::mt19937 rng(2024);
  int loaded = 0, refused = 0;
  // Byte damage: flips, deletions, insertions, truncations.
  for (int i = 0; i < 1500; ++i) {
    std::string damaged = text;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n && !damaged.empty(); ++k) {
      const std::size_t at = rng() % damaged.size();
      switch (rng() % 4) {
        case 0:
          damaged[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          damaged.erase(at, 1 + rng() % 8);
          break;
        case 2:
          damaged.insert(at, 1, "{}[]\",:0-9a\\ "[rng() % 14]);
          break;
        default:
          damaged.resize(at);
          break;
      }
    }
    check_damaged(damaged, loaded, refused);
  }
  // Structural damage: a value replaced by another of any type, or a member removed.
  const std::vector<json::value> replacements = {nullptr,
                                                 true,
                                                 0,
                                                 -1,
                                                 3.5,
                                                 1e30,
                                                 "",
                                                 "a b",
                                                 "\u0120",
                                                 json::array{},
                                                 json::object{},
                                                 json::array{"a", "b"},
                                                 json::object{{"type", "BPE"}},
                                                 json::object{{"Regex", "(?<=x)"}},
                                                 4294967296LL};
  for (int i = 0; i < 1500; ++i) {
    json::value doc = base;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 2); k < n; ++k) {
      json::value* node = random_node(doc, rng);
      if (node->is_object() && !node->get_object().empty() && rng() % 2 == 0) {
        auto& o = node->get_object();
        o.erase(o.begin() + static_cast<std::ptrdiff_t>(rng() % o.size()));
      } else {
        *node = replacements[rng() % replacements.size()];
      }
    }
    check_damaged(json::serialize(doc), loaded, refused);
  }
  BOOST_TEST_MESSAGE(loaded << " damaged copies loaded, " << refused << " refused");
  BOOST_TEST(loaded > 50);
  BOOST_TEST(refused > 1000);
}

// The fingerprint plexus-train compares with the one recorded beside a dataset: the same for the
// same encoding however the file spells it, different for anything that changes an id.
BOOST_AUTO_TEST_CASE(the_fingerprint_follows_the_encoding_not_the_files_spelling) {
  const json::object doc = tokenizer_json({"ab", "abc"}, {"a b", "ab c"},
                                          json::array{added_token(258, "<|endoftext|>", true, false)});
  const std::string fingerprint = load(doc).fingerprint();
  BOOST_TEST(fingerprint.starts_with("bpe:xxh64:"));
  BOOST_TEST(fingerprint.size() == 10U + 16U);
  BOOST_TEST(plexus::data::ByteTokenizer().fingerprint() == "byte");
  // The same tokenizer: merges as pairs, the file rewritten in another layout and key order.
  json::object pairs = doc;
  pairs["model"].as_object()["merges"] = json::array{json::array{"a", "b"}, json::array{"ab", "c"}};
  BOOST_TEST(load(pairs).fingerprint() == fingerprint);
  BOOST_TEST(BpeTokenizer::from_json(load(doc).to_json(), "rewritten.json").fingerprint() == fingerprint);
  json::object reordered;
  for (auto it = doc.rbegin(); it != doc.rend(); ++it) reordered[it->key()] = it->value();
  BOOST_TEST(load(reordered).fingerprint() == fingerprint);
  // Other tokenizers: the merges in another order, another token, an added token no longer special.
  BOOST_TEST(load(tokenizer_json({"ab", "abc"}, {"ab c", "a b"},
                                 json::array{added_token(258, "<|endoftext|>", true, false)}))
                 .fingerprint() != fingerprint);
  BOOST_TEST(load(tokenizer_json({"ab", "abd"}, {"a b", "ab d"},
                                 json::array{added_token(258, "<|endoftext|>", true, false)}))
                 .fingerprint() != fingerprint);
  BOOST_TEST(load(tokenizer_json({"ab", "abc"}, {"a b", "ab c"},
                                 json::array{added_token(258, "<|endoftext|>", false, false)}))
                 .fingerprint() != fingerprint);
}

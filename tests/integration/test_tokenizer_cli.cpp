// `plexus tokenizer train|encode|decode|inspect` and `plexus data prepare --tokenizer`, run as a
// user runs them: the files they write, what they print, and how they refuse bad input.
#define BOOST_TEST_MODULE tokenizer_cli
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "plexus/core/data/bpe_tokenizer.hpp"
#include "plexus/core/data/indexed_dataset.hpp"
#include "run_process.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using plexus::test::quote;
using plexus::test::run_process;

namespace {

const std::string kPlexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A corpus of a few paragraphs and a tokenizer trained on it.
struct Fixture {
  plexus::test::TempDir dir;
  fs::path corpus, tokenizer;
  Fixture() {
    std::string text;
    for (int i = 0; i < 120; ++i)
      text += "Paragraph " + std::to_string(i) + ": the cat sat on the mat, and it's happy.\nSecond line " +
              std::to_string(i % 13) + ".\n\n";
    corpus = dir.write("corpus.txt", text);
    tokenizer = dir.path() / "tokenizer.json";
    const auto trained = run_process(kPlexus + " tokenizer train --input " + quote(corpus.string()) +
                                     " --vocab-size 300 --output " + quote(tokenizer.string()));
    BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
  }
  plexus::data::BpeTokenizer load() const { return plexus::data::BpeTokenizer::load(tokenizer); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(train_writes_a_tokenizer_json_and_reports_what_it_learned) {
  const Fixture f;
  const auto t = f.load();
  BOOST_TEST(t.vocab_size() == 300);
  BOOST_TEST(t.merge_count() == 300u - 256u - 1u);
  BOOST_TEST(t.end_of_document().value_or(-1) == 299);  // <|endoftext|>, the default special token
  BOOST_TEST(t.token_id("a").value_or(-1) == 'a');      // bytes keep their values as ids

  const auto inspected = run_process(kPlexus + " tokenizer inspect " + quote(f.tokenizer.string()));
  BOOST_TEST(inspected.status == 0, inspected.output);
  BOOST_TEST(contains(inspected.output, "vocab_size:      300"), inspected.output);
  BOOST_TEST(contains(inspected.output, "end of document: <|endoftext|> (id 299)"), inspected.output);
  BOOST_TEST(contains(inspected.output, "ByteLevel (GPT-2 split regex, no prefix space)"), inspected.output);
}

BOOST_AUTO_TEST_CASE(encode_and_decode_round_trip_through_the_command_line) {
  const Fixture f;
  const std::string tok = " --tokenizer " + quote(f.tokenizer.string());
  const auto encoded =
      run_process(kPlexus + " tokenizer encode" + tok + " 'the cat sat on the mat<|endoftext|>'");
  BOOST_TEST_REQUIRE(encoded.status == 0, encoded.output);
  const std::vector<int32_t> expected = f.load().encode("the cat sat on the mat<|endoftext|>");
  std::string ids;
  for (const int32_t id : expected) {
    if (!ids.empty()) ids += ' ';
    ids += std::to_string(id);
  }
  BOOST_TEST(encoded.output == ids + "\n");
  BOOST_TEST(expected.back() == 299);
  const auto decoded = run_process(kPlexus + " tokenizer decode" + tok + " " + ids);
  BOOST_TEST(decoded.status == 0, decoded.output);
  BOOST_TEST(decoded.output == "the cat sat on the mat<|endoftext|>\n");

  const auto pieces = run_process(kPlexus + " tokenizer encode --pieces" + tok + " 'it'\\''s  a cat'");
  BOOST_TEST(pieces.status == 0, pieces.output);
  BOOST_TEST(pieces.output ==
             "[\"it\",\"'s\",\"\xC4\xA0\",\"\xC4\xA0"
             "a\",\"\xC4\xA0"
             "cat\"]\n");  // Ġ = U+0120

  const auto bad = run_process(kPlexus + " tokenizer decode" + tok + " 12 x");
  BOOST_TEST(bad.status == 1);
  BOOST_TEST(contains(bad.output, "'x' is not a token id"), bad.output);
  const auto unknown = run_process(kPlexus + " tokenizer decode" + tok + " 12 5000");
  BOOST_TEST(unknown.status == 1);
  BOOST_TEST(contains(unknown.output, "token 5000 at position 1 is not in the vocabulary"), unknown.output);
}

BOOST_AUTO_TEST_CASE(train_refuses_bad_options_and_leaves_no_file) {
  const Fixture f;
  const fs::path out = f.dir.path() / "new.json";
  const std::string base = kPlexus + " tokenizer train --input " + quote(f.corpus.string());
  auto run = run_process(base + " --vocab-size 200 --output " + quote(out.string()));
  BOOST_TEST(run.status == 1);
  BOOST_TEST(contains(run.output,
                      "--vocab-size 200 is too small: the 256 byte tokens and 1 special tokens need 257"),
             run.output);
  run = run_process(base + " --vocab-size 300");
  BOOST_TEST(run.status == 1);
  BOOST_TEST(contains(run.output, "give --output FILE"), run.output);
  run = run_process(kPlexus + " tokenizer train --input " + quote((f.dir.path() / "nothing.txt").string()) +
                    " --vocab-size 300 --output " + quote(out.string()));
  BOOST_TEST(run.status == 1);
  BOOST_TEST(contains(run.output, "nothing.txt: no such file or directory"), run.output);
  BOOST_TEST(!fs::exists(out));
  BOOST_TEST(!fs::exists(out.string() + ".tmp"));
}

BOOST_AUTO_TEST_CASE(a_bad_tokenizer_file_is_named_with_its_field) {
  const Fixture f;
  std::string text = read(f.tokenizer);
  const std::string from = "\"type\": \"BPE\"";
  text.replace(text.find(from), from.size(), "\"type\": \"WordPiece\"");
  const auto bad = f.dir.write("wordpiece.json", text);
  const auto run = run_process(kPlexus + " tokenizer encode --tokenizer " + quote(bad.string()) + " hello");
  BOOST_TEST(run.status == 1);
  BOOST_TEST(contains(run.output, bad.string() + ": model.type: \"WordPiece\" is not supported"), run.output);
  const auto prep =
      run_process(kPlexus + " data prepare --input " + quote(f.corpus.string()) + " --output-prefix " +
                  quote((f.dir.path() / "ds").string()) + " --tokenizer " + quote(bad.string()));
  BOOST_TEST(prep.status == 1);
  BOOST_TEST(contains(prep.output, "model.type"), prep.output);
  BOOST_TEST(!fs::exists(f.dir.path() / "ds.bin"));
}

BOOST_AUTO_TEST_CASE(prepare_with_a_tokenizer_appends_the_end_of_document_token_and_keeps_the_tokenizer) {
  const Fixture f;
  const fs::path prefix = f.dir.path() / "ds";
  const auto run =
      run_process(kPlexus + " data prepare --input " + quote(f.corpus.string()) + " --output-prefix " +
                  quote(prefix.string()) + " --tokenizer " + quote(f.tokenizer.string()));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  BOOST_TEST(contains(run.output, "<|endoftext|> (id 299) ends each document; dtype uint16"), run.output);
  BOOST_TEST(read(prefix.string() + ".tokenizer.json") == read(f.tokenizer));

  const plexus::data::IndexedDataset dataset(prefix);
  const auto t = f.load();
  BOOST_TEST((dataset.dtype() == plexus::data::TokenDtype::uint16));
  BOOST_TEST_REQUIRE(dataset.document_count() == 120u);
  for (std::size_t d = 0; d < dataset.document_count(); ++d) {
    const std::vector<int64_t> ids = dataset.document(d).to_vector();
    BOOST_TEST_REQUIRE(ids.back() == 299);
    const std::vector<int32_t> body(ids.begin(), ids.end() - 1);
    const std::string expected = "Paragraph " + std::to_string(d) +
                                 ": the cat sat on the mat, and it's happy.\nSecond line " +
                                 std::to_string(d % 13) + ".";
    BOOST_TEST_REQUIRE(t.decode(body) == expected);
  }

  // inspect decodes with the tokenizer beside the dataset.
  const auto inspected = run_process(kPlexus + " data inspect " + quote(prefix.string()) + " --chars 30");
  BOOST_TEST(inspected.status == 0, inspected.output);
  BOOST_TEST(contains(inspected.output, "text:       \"Paragraph 0: the cat sat on th\"..."),
             inspected.output);

  // --no-eod; a byte dataset at the same prefix drops the stale tokenizer copy.
  BOOST_TEST_REQUIRE(run_process(kPlexus + " data prepare --no-eod --input " + quote(f.corpus.string()) +
                                 " --output-prefix " + quote(prefix.string()) + " --tokenizer " +
                                 quote(f.tokenizer.string()))
                         .status == 0);
  BOOST_TEST(plexus::data::IndexedDataset(prefix).document(0).to_vector().back() != 299);
  BOOST_TEST_REQUIRE(run_process(kPlexus + " data prepare --input " + quote(f.corpus.string()) +
                                 " --output-prefix " + quote(prefix.string()))
                         .status == 0);
  BOOST_TEST(!fs::exists(prefix.string() + ".tokenizer.json"));
}

BOOST_AUTO_TEST_CASE(prepare_picks_a_dtype_wide_enough_for_the_vocabulary) {
  const Fixture f;
  // uint8 cannot hold ids up to 299.
  auto run = run_process(kPlexus + " data prepare --dtype uint8 --input " + quote(f.corpus.string()) +
                         " --output-prefix " + quote((f.dir.path() / "narrow").string()) + " --tokenizer " +
                         quote(f.tokenizer.string()));
  BOOST_TEST(run.status == 1);
  BOOST_TEST(contains(run.output, "--dtype uint8 cannot hold the ids of a tokenizer of 300 tokens"),
             run.output);
  run = run_process(kPlexus + " data prepare --eod '<nope>' --input " + quote(f.corpus.string()) +
                    " --output-prefix " + quote((f.dir.path() / "eod").string()) + " --tokenizer " +
                    quote(f.tokenizer.string()));
  BOOST_TEST(run.status == 1);
  BOOST_TEST(contains(run.output, "--eod '<nope>': the tokenizer has no such token"), run.output);

  // A vocabulary of 65500 tokens or more takes int32, as Megatron's preprocess_data.py does.
  boost::json::value doc = boost::json::parse(read(f.tokenizer));
  auto& vocab = doc.at("model").at("vocab").as_object();
  auto& added = doc.at("added_tokens").as_array();
  vocab.erase("<|endoftext|>");
  for (int i = 0; vocab.size() < 65600; ++i) {
    const auto id = static_cast<int64_t>(vocab.size());
    vocab["<pad " + std::to_string(i) + ">"] = id;
  }
  const auto eod = static_cast<int64_t>(vocab.size());
  vocab["<|endoftext|>"] = eod;
  added[0].as_object()["id"] = static_cast<int64_t>(vocab.size() - 1);
  const auto big = f.dir.write("big.json", boost::json::serialize(doc));
  const fs::path wide = f.dir.path() / "wide";
  run = run_process(kPlexus + " data prepare --input " + quote(f.corpus.string()) + " --output-prefix " +
                    quote(wide.string()) + " --tokenizer " + quote(big.string()));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  BOOST_TEST(contains(run.output, "dtype int32"), run.output);
  BOOST_TEST((plexus::data::IndexedDataset(wide).dtype() == plexus::data::TokenDtype::int32));
  BOOST_TEST(plexus::data::IndexedDataset(wide).document(0).to_vector().back() == 65600);
}

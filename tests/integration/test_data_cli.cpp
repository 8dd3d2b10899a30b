// `plexus data prepare|inspect` run as a user runs them, and the datasets checked against
// tests/reference/megatron_indexed_dataset.py, which reads and writes the format as
// Megatron-LM's indexed_dataset.py does. The Python cases need /usr/bin/python3 with numpy
// (Debian: python3-numpy); without it they are reported as skipped, not passed.
#define BOOST_TEST_MODULE data_cli
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "plexus/core/data/indexed_dataset.hpp"
#include "run_process.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using plexus::test::quote;
using plexus::test::run_process;

namespace {

const std::string kPlexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus";
const std::string kScript = std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/megatron_indexed_dataset.py";

// The system Python (a pyenv one earlier on PATH may lack numpy); PLEXUS_TEST_PYTHON overrides.
std::string python() {
  const char* custom = std::getenv("PLEXUS_TEST_PYTHON");
  return custom != nullptr && *custom != '\0' ? custom : "/usr/bin/python3";
}

boost::test_tools::assertion_result numpy_available(boost::unit_test::test_unit_id) {
  static const int status = run_process(quote(python()) + " -c 'import numpy'").status;
  boost::test_tools::assertion_result result(status == 0);
  result.message() << "SKIPPED: " << python()
                   << " cannot import numpy, which the Megatron reference script needs (Debian: python3-numpy)";
  return result;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string prepare(const std::string& arguments) { return kPlexus + " data prepare " + arguments; }

boost::json::object inspect_json(const fs::path& prefix) {
  const auto result = run_process(kPlexus + " data inspect --json " + quote(prefix.string()));
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  return boost::json::parse(result.output.substr(result.output.find('{'))).as_object();
}

boost::json::object python_read(const fs::path& prefix, int first = 32) {
  const auto result =
      run_process(quote(python()) + " " + quote(kScript) + " read " + quote(prefix.string()) + " --first " + std::to_string(first));
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  return boost::json::parse(result.output.substr(result.output.find('{'))).as_object();
}

std::vector<int64_t> all_tokens(const fs::path& prefix) { return plexus::data::IndexedDataset(prefix).tokens().to_vector(); }

std::vector<int64_t> bytes_of(const std::string& text) {
  std::vector<int64_t> out;
  for (const char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Nothing at PREFIX.* and no temporary files anywhere in dir.
bool nothing_written(const fs::path& dir) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".bin") != std::string::npos || name.find(".idx") != std::string::npos) return false;
  }
  return true;
}

// A small corpus: two files of paragraphs, a nested directory, and things a walk must skip.
struct Corpus {
  plexus::test::TempDir dir;
  fs::path root;
  Corpus() : root(dir.path() / "corpus") {
    fs::create_directories(root / "nested");
    fs::create_directories(root / ".hidden");
    dir.write("corpus/b.txt", "Second file.\n");
    dir.write("corpus/a.txt", "First paragraph,\nline two.\n\n   \nCaf\xc3\xa9 au lait.\r\n\r\n\nx\n");
    dir.write("corpus/nested/c.txt", "\xEF\xBB\xBFNested text.");
    dir.write("corpus/.hidden/secret.txt", "never read");
    dir.write("corpus/image.dat", std::string("PNG\0\x01\x02", 6));
  }
  // The paragraphs, in walk order (a.txt, b.txt, nested/c.txt), with CRLF and the BOM gone.
  static std::vector<std::string> paragraphs() {
    return {"First paragraph,\nline two.", "Caf\xc3\xa9 au lait.", "x", "Second file.", "Nested text."};
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(prepare_then_inspect) {
  Corpus corpus;
  const fs::path prefix = corpus.dir.path() / "out" / "ds";
  fs::create_directories(prefix.parent_path());
  const auto result = run_process(prepare("--input " + quote(corpus.root.string()) + " --output-prefix " + quote(prefix.string())));
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  BOOST_TEST(contains(result.output, "documents:  5 (paragraphs)"), result.output);
  BOOST_TEST(contains(result.output, "files:      3 read, 1 skipped"), result.output);
  BOOST_TEST(contains(result.output, "skipping " + (corpus.root / "image.dat").string() + ": not UTF-8 text (a NUL byte at offset 3)"),
             result.output);
  BOOST_TEST(!contains(result.output, "secret"), result.output);

  std::string stream;
  for (const std::string& paragraph : Corpus::paragraphs()) stream += paragraph;
  BOOST_TEST(all_tokens(prefix) == bytes_of(stream), boost::test_tools::per_element());
  const plexus::data::IndexedDataset dataset(prefix);
  BOOST_TEST(dataset.document_count() == 5u);
  BOOST_TEST(dataset.document(1).to_vector() == bytes_of("Caf\xc3\xa9 au lait."), boost::test_tools::per_element());
  BOOST_TEST(contains(result.output, "tokens:     " + std::to_string(stream.size())), result.output);

  const auto json = inspect_json(prefix);
  BOOST_TEST(json.at("dtype").as_string() == "uint16");  // the default, as Megatron picks for vocab 256
  BOOST_TEST(json.at("sequence_count").to_number<int64_t>() == 5);
  BOOST_TEST(json.at("document_count").to_number<int64_t>() == 5);
  BOOST_TEST(json.at("token_count").to_number<int64_t>() == static_cast<int64_t>(stream.size()));
  BOOST_TEST(json.at("first_tokens").as_array().size() == 32u);
  // The entropy of the byte frequencies of the stream, computed here independently.
  std::map<unsigned char, double> counts;
  for (unsigned char c : stream) counts[c] += 1;
  double entropy = 0;
  const auto total = static_cast<double>(stream.size());
  for (const auto& [byte, count] : counts) entropy -= count / total * std::log(count / total);
  BOOST_TEST(json.at("unigram_entropy_nats").as_double() == entropy, boost::test_tools::tolerance(1e-12));

  const auto text = run_process(kPlexus + " data inspect " + quote(prefix.string()));
  BOOST_TEST_REQUIRE(text.status == 0, text.output);
  BOOST_TEST(contains(text.output, "dtype:      uint16 (code 8)"), text.output);
  BOOST_TEST(contains(text.output, "sequences:  5"), text.output);
  BOOST_TEST(contains(text.output, "documents:  5"), text.output);
  BOOST_TEST(contains(text.output, "text:       \"First paragraph,\\nline two.Caf\xc3\xa9 au lait.xSecond"), text.output);

  const auto short_text = run_process(kPlexus + " data inspect --chars 5 " + quote(prefix.string() + ".idx"));
  BOOST_TEST(contains(short_text.output, "text:       \"First\"..."), short_text.output);
}

BOOST_AUTO_TEST_CASE(documents_per_file_min_chars_and_dtypes) {
  Corpus corpus;
  const fs::path prefix = corpus.dir.path() / "per_file";
  auto result = run_process(prepare("--input " + quote((corpus.root / "a.txt").string()) + " " +
                                    quote((corpus.root / "b.txt").string()) + " --document-per-file --dtype uint8 --output-prefix " +
                                    quote(prefix.string())));
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const plexus::data::IndexedDataset per_file(prefix);
  BOOST_TEST(per_file.document_count() == 2u);
  BOOST_TEST((per_file.dtype() == plexus::data::TokenDtype::uint8));
  BOOST_TEST(per_file.document(0).to_vector() == bytes_of(read_bytes(corpus.root / "a.txt")), boost::test_tools::per_element());

  // "Café au lait." is 13 characters (14 bytes): kept at 13, dropped at 14; "x" always dropped.
  const fs::path kept = corpus.dir.path() / "kept";
  result = run_process(prepare("--input " + quote((corpus.root / "a.txt").string()) + " --min-doc-chars 13 --dtype int32 --output-prefix " +
                               quote(kept.string())));
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  BOOST_TEST(plexus::data::IndexedDataset(kept).document_count() == 2u);
  BOOST_TEST((plexus::data::IndexedDataset(kept).dtype() == plexus::data::TokenDtype::int32));
  result = run_process(prepare("--input " + quote((corpus.root / "a.txt").string()) + " --min-doc-chars 14 --output-prefix " +
                               quote(kept.string())));
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  BOOST_TEST(plexus::data::IndexedDataset(kept).document_count() == 1u);
}

BOOST_AUTO_TEST_CASE(prepare_errors_leave_nothing_behind) {
  Corpus corpus;
  const fs::path out = corpus.dir.path() / "out";
  fs::create_directories(out);
  const std::string prefix = quote((out / "ds").string());
  const auto check = [&](const std::string& arguments, const std::vector<std::string>& parts) {
    const auto result = run_process(prepare(arguments));
    BOOST_TEST(result.status != 0, arguments << ": " << result.output);
    for (const std::string& part : parts) BOOST_TEST(contains(result.output, part), "'" << part << "' not in: " << result.output);
    BOOST_TEST(nothing_written(corpus.dir.path()), arguments);
  };
  check("--input " + quote((corpus.dir.path() / "nope.txt").string()) + " --output-prefix " + prefix,
        {"plexus data: error: input " + (corpus.dir.path() / "nope.txt").string() + ": no such file or directory"});
  check("--input " + quote((corpus.root / "image.dat").string()) + " --output-prefix " + prefix,
        {"image.dat: not UTF-8 text (a NUL byte at offset 3)"});
  corpus.dir.write("latin1.txt", "caf\xe9\n");
  check("--input " + quote((corpus.dir.path() / "latin1.txt").string()) + " --output-prefix " + prefix,
        {"latin1.txt: not UTF-8 text (invalid UTF-8 at byte offset 3)"});
  corpus.dir.write("blank.txt", "\n   \n\t\n");
  check("--input " + quote((corpus.dir.path() / "blank.txt").string()) + " --output-prefix " + prefix,
        {"no documents to write", "nothing was written"});
  fs::create_directories(corpus.dir.path() / "empty_dir");
  check("--input " + quote((corpus.dir.path() / "empty_dir").string()) + " --output-prefix " + prefix,
        {"no documents to write (no input files were found"});
  check("--input " + quote(corpus.root.string()) + " --output-prefix " + quote((out / "missing" / "ds").string()),
        {"cannot write " + (out / "missing" / "ds.bin").string() + ": directory " + (out / "missing").string() + " does not exist"});
  check("--input " + quote(corpus.root.string()) + " --output-prefix " + quote((out / "ds.bin").string()),
        {"would write " + (out / "ds.bin").string() + ".bin", "drop the extension"});
  check("--input " + quote(corpus.root.string()) + " --dtype float32 --output-prefix " + prefix,
        {"--dtype must be uint8, uint16 or int32, not 'float32'"});
  check("--input " + quote(corpus.root.string()) + " --dtype uint8", {"give --output-prefix PREFIX"});
  check("--output-prefix " + prefix, {"give at least one --input"});

  // A failed prepare keeps the dataset already at the prefix.
  auto result = run_process(prepare("--input " + quote(corpus.root.string()) + " --output-prefix " + prefix));
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const std::string idx_before = read_bytes(out / "ds.idx"), bin_before = read_bytes(out / "ds.bin");
  result = run_process(prepare("--input " + quote((corpus.dir.path() / "blank.txt").string()) + " --output-prefix " + prefix));
  BOOST_TEST(result.status != 0, result.output);
  BOOST_TEST(read_bytes(out / "ds.idx") == idx_before);
  BOOST_TEST(read_bytes(out / "ds.bin") == bin_before);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(out)) ++files;
  BOOST_TEST(files == 3u);  // .bin, .idx, .tokenizer-fingerprint.json: no temporary files left
  BOOST_TEST(fs::exists(out / "ds.tokenizer-fingerprint.json"));
}

BOOST_AUTO_TEST_CASE(inspect_errors) {
  plexus::test::TempDir dir;
  auto result = run_process(kPlexus + " data inspect " + quote((dir.path() / "none").string()));
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "no such file: " + (dir.path() / "none.idx").string() + " and " +
                                         (dir.path() / "none.bin").string()),
             result.output);
  dir.write("bad.idx", "definitely not an index");
  dir.write("bad.bin", "");
  result = run_process(kPlexus + " data inspect " + quote((dir.path() / "bad").string()));
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, (dir.path() / "bad.idx").string() + ": not a Megatron indexed dataset (.idx magic)"),
             result.output);
  result = run_process(kPlexus + " data inspect");
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "give exactly one dataset PREFIX"), result.output);
  result = run_process(kPlexus + " data frobnicate");
  BOOST_TEST(result.status == 1);
  BOOST_TEST(contains(result.output, "expected 'prepare', 'inspect', 'samples' or 'digits'"), result.output);
  result = run_process(kPlexus + " data prepare --help");
  BOOST_TEST(result.status == 0);
  BOOST_TEST(contains(result.output, "--min-doc-chars"), result.output);
}

// ---- against the Megatron reference script ---------------------------------------------------

BOOST_AUTO_TEST_CASE(megatron_reads_what_plexus_writes, *boost::unit_test::precondition(numpy_available)) {
  Corpus corpus;
  for (const std::string dtype : {"uint8", "uint16", "int32"}) {
    BOOST_TEST_CONTEXT("dtype " << dtype) {
      const fs::path prefix = corpus.dir.path() / ("ours_" + dtype);
      const auto result = run_process(prepare("--input " + quote(corpus.root.string()) + " --dtype " + dtype +
                                              " --output-prefix " + quote(prefix.string())));
      BOOST_TEST_REQUIRE(result.status == 0, result.output);
      const auto ours = inspect_json(prefix);
      const auto megatron = python_read(prefix, 40);
      BOOST_TEST(megatron.at("dtype").as_string() == dtype);
      for (const char* key : {"dtype_code", "sequence_count", "document_count", "token_count"})
        BOOST_TEST(megatron.at(key).to_number<int64_t>() == ours.at(key).to_number<int64_t>(), key);
      const auto tokens = all_tokens(prefix);
      std::vector<int64_t> first;
      for (const auto& t : megatron.at("first_tokens").as_array()) first.push_back(t.to_number<int64_t>());
      BOOST_TEST(first == std::vector<int64_t>(tokens.begin(), tokens.begin() + 40), boost::test_tools::per_element());
      BOOST_TEST(megatron.at("token_sum").to_number<int64_t>() == std::accumulate(tokens.begin(), tokens.end(), int64_t{0}));
    }
  }
}

BOOST_AUTO_TEST_CASE(plexus_reads_what_megatron_writes, *boost::unit_test::precondition(numpy_available)) {
  plexus::test::TempDir dir;
  // Documents of several sequences (Megatron's --split-sentences layout), an empty sequence
  // and an empty document, with values at the edges of each dtype.
  const std::vector<std::pair<std::string, std::vector<std::vector<std::vector<int64_t>>>>> cases = {
      {"uint16", {{{1, 2, 3}, {4}}, {{65535, 0}}, {}, {{}, {9, 8, 7}}}},
      {"int32", {{{2147483647, -2147483648LL}}, {{5}, {6}, {7}}}},
      {"uint8", {{{255, 0, 1}}}},
      {"int64", {{{int64_t{1} << 40, -1}}, {{3}}}},
  };
  for (const auto& [dtype, documents] : cases) {
    BOOST_TEST_CONTEXT("dtype " << dtype) {
      const fs::path prefix = dir.path() / ("megatron_" + dtype);
      boost::json::array docs;
      std::vector<int64_t> flat;
      std::size_t sequences = 0;
      for (const auto& document : documents) {
        boost::json::array doc;
        for (const auto& sequence : document) {
          doc.push_back(boost::json::value_from(sequence));
          flat.insert(flat.end(), sequence.begin(), sequence.end());
          ++sequences;
        }
        docs.push_back(std::move(doc));
      }
      const auto input = dir.write(dtype + ".json", boost::json::serialize(boost::json::object{{"documents", docs}}));
      const auto written = run_process(quote(python()) + " " + quote(kScript) + " write " + quote(prefix.string()) +
                                        " --dtype " + dtype + " --json " + quote(input.string()));
      BOOST_TEST_REQUIRE(written.status == 0, written.output);

      const plexus::data::IndexedDataset dataset(prefix);
      BOOST_TEST(plexus::data::dtype_name(dataset.dtype()) == dtype);
      BOOST_TEST(dataset.sequence_count() == sequences);
      BOOST_TEST(dataset.document_count() == documents.size());
      BOOST_TEST(dataset.tokens().to_vector() == flat, boost::test_tools::per_element());
      std::size_t sequence = 0;
      for (std::size_t d = 0; d < documents.size(); ++d) {
        BOOST_TEST(dataset.document_index(d) == sequence);
        std::vector<int64_t> document_tokens;
        for (const auto& expected : documents[d]) {
          BOOST_TEST(dataset.sequence(sequence++).to_vector() == expected, boost::test_tools::per_element());
          document_tokens.insert(document_tokens.end(), expected.begin(), expected.end());
        }
        BOOST_TEST(dataset.document(d).to_vector() == document_tokens, boost::test_tools::per_element());
      }

      const auto ours = inspect_json(prefix);
      const auto megatron = python_read(prefix);
      for (const char* key : {"dtype_code", "sequence_count", "document_count", "token_count"})
        BOOST_TEST(megatron.at(key).to_number<int64_t>() == ours.at(key).to_number<int64_t>(), key);
      BOOST_TEST(boost::json::serialize(megatron.at("first_tokens")) == boost::json::serialize(ours.at("first_tokens")));
    }
  }
}

BOOST_AUTO_TEST_CASE(plexus_and_megatron_write_identical_bytes, *boost::unit_test::precondition(numpy_available)) {
  // One sequence per document (preprocess_data.py's default): both writers, same files.
  plexus::test::TempDir dir;
  const std::vector<std::vector<int64_t>> documents = {{72, 105}, {}, {1, 2, 3, 4, 5}, {65535}};
  boost::json::array docs;
  for (const auto& document : documents) docs.push_back(boost::json::array{boost::json::value_from(document)});
  const auto input = dir.write("docs.json", boost::json::serialize(boost::json::object{{"documents", docs}}));
  for (const auto& [dtype, name] : {std::pair{plexus::data::TokenDtype::uint16, "uint16"},
                                    std::pair{plexus::data::TokenDtype::int32, "int32"},
                                    std::pair{plexus::data::TokenDtype::int64, "int64"}}) {
    BOOST_TEST_CONTEXT("dtype " << name) {
      const fs::path ours = dir.path() / (std::string("ours_") + name), theirs = dir.path() / (std::string("theirs_") + name);
      {
        plexus::data::IndexedDatasetWriter writer(ours, dtype);
        for (const auto& document : documents) writer.add_document(document);
        writer.finalize();
      }
      const auto written = run_process(quote(python()) + " " + quote(kScript) + " write " + quote(theirs.string()) +
                                        " --dtype " + name + " --json " + quote(input.string()));
      BOOST_TEST_REQUIRE(written.status == 0, written.output);
      BOOST_TEST(read_bytes(plexus::data::idx_path(ours)) == read_bytes(plexus::data::idx_path(theirs)));
      BOOST_TEST(read_bytes(plexus::data::bin_path(ours)) == read_bytes(plexus::data::bin_path(theirs)));
    }
  }
}

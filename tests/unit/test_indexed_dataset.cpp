// Megatron indexed datasets: the writer and reader against each other for every integer
// dtype, the reader against files built byte by byte here from the format description
// (independently of the writer), the writer's bytes against the same description, every
// refusal of a broken file, and the byte tokenizer.
#define BOOST_TEST_MODULE indexed_dataset
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/data/tokenizer.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using plexus::DataError;
using plexus::data::IndexedDataset;
using plexus::data::IndexedDatasetWriter;
using plexus::data::TokenDtype;

namespace plexus::data {
// So BOOST_TEST can print a dtype when a comparison fails.
std::ostream& operator<<(std::ostream& os, TokenDtype dtype) { return os << dtype_name(dtype); }
}  // namespace plexus::data

namespace {

// ---- building files by hand -------------------------------------------------------------

struct Bytes {
  std::string data;
  template <typename T>
  Bytes& put(T value) {
    // Little-endian, byte by byte, whatever the host: the format's definition.
    auto bits = static_cast<uint64_t>(value);
    for (std::size_t i = 0; i < sizeof(T); ++i) data.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
    return *this;
  }
  Bytes& raw(const std::string& text) {
    data += text;
    return *this;
  }
};

// The .idx as the format describes it: magic, version, dtype code, counts, int32 lengths,
// int64 pointers, int64 document indices. Counts default to the array sizes.
struct IdxSpec {
  std::string magic = std::string("MMIDIDX\0\0", 9);
  uint64_t version = 1;
  uint8_t code = 8;  // uint16
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;  // default: contiguous from 0
  std::vector<int64_t> documents;
  std::optional<uint64_t> sequence_count, document_count;

  std::string bytes(std::size_t itemsize = 2) const {
    Bytes b;
    b.raw(magic).put<uint64_t>(version).put<uint8_t>(code);
    b.put<uint64_t>(sequence_count.value_or(lengths.size())).put<uint64_t>(document_count.value_or(documents.size()));
    for (const int32_t length : lengths) b.put<int32_t>(length);
    if (pointers.empty()) {
      int64_t at = 0;
      for (const int32_t length : lengths) {
        b.put<int64_t>(at);
        at += length * static_cast<int64_t>(itemsize);
      }
    } else {
      for (const int64_t pointer : pointers) b.put<int64_t>(pointer);
    }
    for (const int64_t document : documents) b.put<int64_t>(document);
    return b.data;
  }
};

void write_file(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  BOOST_TEST_REQUIRE(static_cast<bool>(out));
}

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string uint16_bin(const std::vector<uint16_t>& tokens) {
  Bytes b;
  for (const uint16_t t : tokens) b.put<uint16_t>(t);
  return b.data;
}

// A small valid uint16 dataset, built by hand: two documents, the first of two sequences
// (as Megatron writes with --split-sentences): [1, 2, 3] [4] | [65535, 7].
IdxSpec sample_spec() {
  IdxSpec spec;
  spec.lengths = {3, 1, 2};
  spec.documents = {0, 2, 3};
  return spec;
}
const std::vector<uint16_t> kSampleTokens = {1, 2, 3, 4, 65535, 7};

fs::path write_sample(const plexus::test::TempDir& dir, const IdxSpec& spec = sample_spec(),
                      const std::string& bin = uint16_bin(kSampleTokens)) {
  const fs::path prefix = dir.path() / "sample";
  write_file(plexus::data::idx_path(prefix), spec.bytes());
  write_file(plexus::data::bin_path(prefix), bin);
  return prefix;
}

// Checks that opening `prefix` fails with a DataError whose message holds every part.
void expect_refused(const fs::path& prefix, const std::vector<std::string>& parts) {
  try {
    IndexedDataset dataset(prefix);
    BOOST_ERROR("opened a broken dataset: " << prefix);
  } catch (const DataError& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) BOOST_TEST(message.find(part) != std::string::npos, "'" << part << "' not in: " << message);
  }
}

std::vector<int64_t> as_vector(const plexus::data::TokenView& view) { return view.to_vector(); }

bool no_temporary_files(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp-") != std::string::npos) return false;
  return true;
}

}  // namespace

// ---- the reader on hand-built files ---------------------------------------------------------

BOOST_AUTO_TEST_CASE(hand_built_dataset_loads) {
  plexus::test::TempDir dir;
  const IndexedDataset dataset(write_sample(dir));
  BOOST_TEST(dataset.dtype() == TokenDtype::uint16);
  BOOST_TEST(dataset.sequence_count() == 3u);
  BOOST_TEST(dataset.document_count() == 2u);
  BOOST_TEST(dataset.token_count() == 6u);
  BOOST_TEST(!dataset.multimodal());
  BOOST_TEST(as_vector(dataset.sequence(0)) == (std::vector<int64_t>{1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(as_vector(dataset.sequence(1)) == (std::vector<int64_t>{4}), boost::test_tools::per_element());
  BOOST_TEST(as_vector(dataset.sequence(2)) == (std::vector<int64_t>{65535, 7}), boost::test_tools::per_element());
  BOOST_TEST(as_vector(dataset.document(0)) == (std::vector<int64_t>{1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(as_vector(dataset.document(1)) == (std::vector<int64_t>{65535, 7}), boost::test_tools::per_element());
  BOOST_TEST(as_vector(dataset.tokens()) == (std::vector<int64_t>{1, 2, 3, 4, 65535, 7}), boost::test_tools::per_element());
  BOOST_TEST(dataset.sequence_pointer(2) == 8u);
  BOOST_TEST(dataset.sequence_offset(2) == 4u);
  BOOST_TEST(dataset.document_index(1) == 2u);
  BOOST_CHECK_THROW(dataset.sequence(3), std::out_of_range);
  BOOST_CHECK_THROW(dataset.document(2), std::out_of_range);
  BOOST_CHECK_THROW(dataset.tokens().at(6), std::out_of_range);
  BOOST_CHECK_THROW(dataset.tokens().subview(5, 2), std::out_of_range);
}

BOOST_AUTO_TEST_CASE(hand_built_signed_and_wide_dtypes_load) {
  plexus::test::TempDir dir;
  const fs::path prefix = dir.path() / "wide";
  IdxSpec spec;
  spec.code = 5;  // int64
  spec.lengths = {2};
  spec.documents = {0, 1};
  write_file(plexus::data::idx_path(prefix), spec.bytes(8));
  write_file(plexus::data::bin_path(prefix), Bytes().put<int64_t>(-5).put<int64_t>(int64_t{1} << 40).data);
  const IndexedDataset wide(prefix);
  BOOST_TEST(as_vector(wide.tokens()) == (std::vector<int64_t>{-5, int64_t{1} << 40}), boost::test_tools::per_element());

  spec.code = 2;  // int8
  write_file(plexus::data::idx_path(prefix), spec.bytes(1));
  write_file(plexus::data::bin_path(prefix), Bytes().put<int8_t>(-128).put<int8_t>(127).data);
  const IndexedDataset narrow(prefix);
  BOOST_TEST(as_vector(narrow.tokens()) == (std::vector<int64_t>{-128, 127}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(empty_dataset_loads) {
  plexus::test::TempDir dir;
  IdxSpec spec;
  spec.documents = {0};
  const IndexedDataset dataset(write_sample(dir, spec, ""));
  BOOST_TEST(dataset.sequence_count() == 0u);
  BOOST_TEST(dataset.document_count() == 0u);
  BOOST_TEST(dataset.token_count() == 0u);
  BOOST_TEST(dataset.tokens().empty());
}

BOOST_AUTO_TEST_CASE(multimodal_sequence_modes_are_accepted_and_ignored) {
  plexus::test::TempDir dir;
  const fs::path prefix = write_sample(dir);
  write_file(plexus::data::idx_path(prefix), sample_spec().bytes() + std::string(3, '\0'));  // int8 mode per sequence
  const IndexedDataset dataset(prefix);
  BOOST_TEST(dataset.multimodal());
  BOOST_TEST(dataset.token_count() == 6u);
}

// ---- every refusal ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(missing_files_are_named) {
  plexus::test::TempDir dir;
  const fs::path prefix = dir.path() / "nothing";
  expect_refused(prefix, {"no such file", (dir.path() / "nothing.idx").string(), (dir.path() / "nothing.bin").string()});
  write_file(plexus::data::idx_path(prefix), sample_spec().bytes());
  expect_refused(prefix, {"no such file", (dir.path() / "nothing.bin").string()});
  fs::remove(plexus::data::idx_path(prefix));
  write_file(plexus::data::bin_path(prefix), uint16_bin(kSampleTokens));
  expect_refused(prefix, {"no such file", (dir.path() / "nothing.idx").string()});
}

BOOST_AUTO_TEST_CASE(bad_magic) {
  plexus::test::TempDir dir;
  IdxSpec spec = sample_spec();
  spec.magic = std::string("MMIDIDY\0\0", 9);
  const fs::path prefix = write_sample(dir, spec);
  expect_refused(prefix, {"sample.idx", "not a Megatron indexed dataset (.idx magic)"});
  write_file(plexus::data::idx_path(prefix), "");
  expect_refused(prefix, {"sample.idx", "not a Megatron indexed dataset (.idx magic)"});
  write_file(plexus::data::idx_path(prefix), "{\"json\": true}");
  expect_refused(prefix, {"not a Megatron indexed dataset (.idx magic)"});
}

BOOST_AUTO_TEST_CASE(unsupported_version) {
  plexus::test::TempDir dir;
  IdxSpec spec = sample_spec();
  spec.version = 2;
  expect_refused(write_sample(dir, spec), {"sample.idx", "unsupported .idx version 2"});
}

BOOST_AUTO_TEST_CASE(unknown_and_float_dtype_codes) {
  plexus::test::TempDir dir;
  IdxSpec spec = sample_spec();
  spec.code = 0;
  expect_refused(write_sample(dir, spec), {"sample.idx", "unknown dtype code 0"});
  spec.code = 9;
  expect_refused(write_sample(dir, spec), {"unknown dtype code 9"});
  spec.code = 7;
  expect_refused(write_sample(dir, spec), {"dtype float32 (code 7)", "integer token datasets only"});
}

BOOST_AUTO_TEST_CASE(truncated_idx) {
  plexus::test::TempDir dir;
  const std::string good = sample_spec().bytes();
  const fs::path prefix = write_sample(dir);
  write_file(plexus::data::idx_path(prefix), good.substr(0, 20));
  expect_refused(prefix, {"sample.idx", "truncated .idx", "20 bytes", "34-byte header"});
  write_file(plexus::data::idx_path(prefix), good.substr(0, 5));  // a prefix of the magic: truncated, not foreign
  expect_refused(prefix, {"truncated .idx"});
  write_file(plexus::data::idx_path(prefix), good.substr(0, good.size() - 4));
  expect_refused(prefix, {"truncated .idx", "3 sequences and 3 document indices", std::to_string(good.size()),
                          std::to_string(good.size() - 4)});
  IdxSpec huge = sample_spec();
  huge.sequence_count = uint64_t{1} << 62;  // the sizes overflow 64 bits
  expect_refused(write_sample(dir, huge), {"truncated .idx", "more than 2^64"});
}

BOOST_AUTO_TEST_CASE(idx_with_trailing_bytes) {
  plexus::test::TempDir dir;
  const fs::path prefix = write_sample(dir);
  write_file(plexus::data::idx_path(prefix), sample_spec().bytes() + "xy");
  expect_refused(prefix, {"sample.idx", "2 unexpected trailing bytes"});
}

BOOST_AUTO_TEST_CASE(bin_size_must_match_the_lengths) {
  plexus::test::TempDir dir;
  const std::string bin = uint16_bin(kSampleTokens);
  expect_refused(write_sample(dir, sample_spec(), bin.substr(0, bin.size() - 2)),
                 {"sample.bin", ".bin size mismatch", "6 uint16 tokens (12 bytes)", "has 10 bytes"});
  expect_refused(write_sample(dir, sample_spec(), bin + "z"), {".bin size mismatch", "has 13 bytes"});
  expect_refused(write_sample(dir, sample_spec(), ""), {".bin size mismatch", "has 0 bytes"});
}

BOOST_AUTO_TEST_CASE(pointers_out_of_bounds_or_not_contiguous) {
  plexus::test::TempDir dir;
  IdxSpec spec = sample_spec();
  spec.pointers = {0, 6, 1000};
  expect_refused(write_sample(dir, spec), {"sample.idx", "sequence 2's pointer 1000", "out of bounds", "12 bytes"});
  spec.pointers = {0, 6, -8};
  expect_refused(write_sample(dir, spec), {"sequence 2's pointer -8", "out of bounds"});
  spec.pointers = {0, 6, 6};
  expect_refused(write_sample(dir, spec), {"sequence 2's pointer is 6, expected 8"});
}

BOOST_AUTO_TEST_CASE(document_indices_must_run_from_zero_to_the_sequence_count) {
  plexus::test::TempDir dir;
  IdxSpec spec = sample_spec();
  spec.documents = {1, 2, 3};
  expect_refused(write_sample(dir, spec), {"sample.idx", "starts with 1, not 0"});
  spec.documents = {0, 2};
  expect_refused(write_sample(dir, spec), {"last document index is 2 but there are 3 sequences"});
  spec.documents = {0, 2, 1, 3};
  expect_refused(write_sample(dir, spec), {"document index 2 is 1"});
  spec.documents = {0, 4};
  expect_refused(write_sample(dir, spec), {"document index 1 is 4"});
  spec.documents = {};
  expect_refused(write_sample(dir, spec), {"document index list is empty"});
}

BOOST_AUTO_TEST_CASE(negative_length) {
  plexus::test::TempDir dir;
  IdxSpec spec = sample_spec();
  spec.lengths = {3, -1, 2};
  spec.pointers = {0, 6, 6};
  expect_refused(write_sample(dir, spec), {"sequence 1 has a negative length (-1)"});
}

// ---- the writer ---------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(writer_bytes_match_the_format) {
  plexus::test::TempDir dir;
  const fs::path prefix = dir.path() / "written";
  {
    IndexedDatasetWriter writer(prefix, TokenDtype::uint16);
    writer.add_document(std::vector<int64_t>{1, 2, 3});
    writer.add_document(std::vector<int32_t>{});
    writer.add_document(std::vector<int32_t>{65535, 7});
    writer.finalize();
    BOOST_TEST(writer.document_count() == 3u);
    BOOST_TEST(writer.token_count() == 5u);
    BOOST_TEST(writer.bin_bytes() == 10u);
  }
  IdxSpec expected;
  expected.lengths = {3, 0, 2};
  expected.pointers = {0, 6, 6};
  expected.documents = {0, 1, 2, 3};  // one sequence per document, as preprocess_data.py writes
  BOOST_TEST(read_bytes(plexus::data::idx_path(prefix)) == expected.bytes());
  BOOST_TEST(read_bytes(plexus::data::bin_path(prefix)) == uint16_bin({1, 2, 3, 65535, 7}));
  BOOST_TEST(no_temporary_files(dir.path()));
}

BOOST_AUTO_TEST_CASE(round_trip_every_integer_dtype) {
  for (const TokenDtype dtype :
       {TokenDtype::uint8, TokenDtype::int8, TokenDtype::int16, TokenDtype::int32, TokenDtype::int64, TokenDtype::uint16}) {
    BOOST_TEST_CONTEXT("dtype " << plexus::data::dtype_name(dtype)) {
      plexus::test::TempDir dir;
      const fs::path prefix = dir.path() / "rt";
      const int64_t lo = plexus::data::dtype_min(dtype), hi = plexus::data::dtype_max(dtype);
      std::vector<std::vector<int64_t>> documents = {{lo, hi, 0, 1}, {}, {}, {hi}};
      std::vector<int64_t> long_document;
      for (int64_t i = 0; i < 1000; ++i) long_document.push_back(i % 100);
      documents.push_back(long_document);
      uint64_t idx_bytes = 0;
      {
        IndexedDatasetWriter writer(prefix, dtype);
        for (const auto& document : documents) writer.add_document(document);
        writer.finalize();
        idx_bytes = writer.idx_bytes();
      }
      const IndexedDataset dataset(prefix);
      BOOST_TEST(dataset.dtype() == dtype);
      BOOST_TEST(dataset.sequence_count() == documents.size());
      BOOST_TEST(dataset.document_count() == documents.size());
      BOOST_TEST(dataset.token_count() == 1005u);
      BOOST_TEST(fs::file_size(plexus::data::idx_path(prefix)) == idx_bytes);
      BOOST_TEST(fs::file_size(plexus::data::bin_path(prefix)) == 1005u * plexus::data::dtype_size(dtype));
      std::vector<int64_t> flat;
      for (std::size_t d = 0; d < documents.size(); ++d) {
        BOOST_TEST(as_vector(dataset.document(d)) == documents[d], boost::test_tools::per_element());
        BOOST_TEST(as_vector(dataset.sequence(d)) == documents[d], boost::test_tools::per_element());
        BOOST_TEST(dataset.document_index(d) == d);
        flat.insert(flat.end(), documents[d].begin(), documents[d].end());
      }
      BOOST_TEST(as_vector(dataset.tokens()) == flat, boost::test_tools::per_element());
      // id_range: the extremes of the whole stream, of a part, and nothing of an empty view.
      BOOST_TEST(dataset.tokens().id_range().min == lo);
      BOOST_TEST(dataset.tokens().id_range().max == hi);
      BOOST_TEST(dataset.document(4).id_range().min == 0);
      BOOST_TEST(dataset.document(4).id_range().max == 99);
      BOOST_TEST(dataset.document(1).id_range().min > dataset.document(1).id_range().max);
      std::vector<int64_t> middle(10);
      dataset.tokens().copy_to(500, middle);
      BOOST_TEST(middle == std::vector<int64_t>(flat.begin() + 500, flat.begin() + 510), boost::test_tools::per_element());
      BOOST_TEST(no_temporary_files(dir.path()));
    }
  }
}

BOOST_AUTO_TEST_CASE(writer_refuses_tokens_that_do_not_fit) {
  plexus::test::TempDir dir;
  const auto has = [](const std::string& part) {
    return [part](const DataError& e) {
      BOOST_TEST_MESSAGE(e.what());
      return std::string(e.what()).find(part) != std::string::npos;
    };
  };
  IndexedDatasetWriter bytes(dir.path() / "u8", TokenDtype::uint8);
  BOOST_CHECK_EXCEPTION(bytes.add_document(std::vector<int32_t>{1, 256}), DataError,
                        has("token 256 (document 0, position 1) does not fit dtype uint8 [0, 255]"));
  BOOST_TEST(bytes.token_count() == 0u);  // nothing of the refused document was written
  IndexedDatasetWriter signed_bytes(dir.path() / "i8", TokenDtype::int8);
  BOOST_CHECK_EXCEPTION(signed_bytes.add_document(std::vector<int64_t>{-129}), DataError, has("does not fit dtype int8"));
  IndexedDatasetWriter halves(dir.path() / "u16", TokenDtype::uint16);
  BOOST_CHECK_EXCEPTION(halves.add_document(std::vector<int64_t>{-1}), DataError, has("does not fit dtype uint16"));
  BOOST_CHECK_EXCEPTION(IndexedDatasetWriter(dir.path() / "f", TokenDtype::float32), DataError,
                        has("dtype float32 does not hold token ids"));
}

BOOST_AUTO_TEST_CASE(writer_reports_an_unwritable_location_at_once) {
  plexus::test::TempDir dir;
  BOOST_CHECK_EXCEPTION(IndexedDatasetWriter(dir.path() / "missing" / "out", TokenDtype::uint16), DataError,
                        [&](const DataError& e) {
                          const std::string message = e.what();
                          return message.find((dir.path() / "missing").string() + " does not exist") != std::string::npos &&
                                 message.find("out.bin") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_CASE(abandoned_writer_leaves_nothing_and_keeps_the_old_dataset) {
  plexus::test::TempDir dir;
  const fs::path prefix = dir.path() / "data";
  {
    IndexedDatasetWriter first(prefix, TokenDtype::uint16);
    first.add_document(std::vector<int64_t>{10, 11});
    first.finalize();
  }
  const std::string idx_before = read_bytes(plexus::data::idx_path(prefix));
  {
    IndexedDatasetWriter second(prefix, TokenDtype::uint8);
    second.add_document(std::vector<int64_t>{1, 2, 3});
    BOOST_TEST(!no_temporary_files(dir.path()));  // work in progress is in temporary files
  }  // destroyed without finalize(): an error or an empty result
  BOOST_TEST(no_temporary_files(dir.path()));
  BOOST_TEST(read_bytes(plexus::data::idx_path(prefix)) == idx_before);
  const IndexedDataset dataset(prefix);
  BOOST_TEST(as_vector(dataset.tokens()) == (std::vector<int64_t>{10, 11}), boost::test_tools::per_element());

  plexus::test::TempDir fresh;
  { IndexedDatasetWriter unused(fresh.path() / "never", TokenDtype::uint16); }
  BOOST_TEST(fs::is_empty(fresh.path()));
}

BOOST_AUTO_TEST_CASE(writer_is_finalized_once) {
  plexus::test::TempDir dir;
  IndexedDatasetWriter writer(dir.path() / "once", TokenDtype::uint16);
  writer.add_document(std::vector<int64_t>{1});
  writer.finalize();
  BOOST_CHECK_THROW(writer.finalize(), DataError);
  BOOST_CHECK_THROW(writer.add_document(std::vector<int64_t>{2}), DataError);
}

BOOST_AUTO_TEST_CASE(dtype_names_and_codes) {
  BOOST_TEST((plexus::data::dtype_from_name("uint16") == TokenDtype::uint16));
  BOOST_TEST(!plexus::data::dtype_from_name("uint32").has_value());
  BOOST_TEST(static_cast<int>(*plexus::data::dtype_from_code(8)) == 8);
  BOOST_TEST(!plexus::data::dtype_from_code(0).has_value());
  BOOST_TEST(!plexus::data::dtype_from_code(9).has_value());
  BOOST_TEST(plexus::data::dtype_size(TokenDtype::float64) == 8u);
  BOOST_TEST(plexus::data::idx_path("a/b.c").string() == "a/b.c.idx");  // appended, never replaced
}

// ---- the byte tokenizer ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(byte_tokenizer_round_trips_any_bytes) {
  const plexus::data::ByteTokenizer tokenizer;
  BOOST_TEST(tokenizer.vocab_size() == 256);
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  const auto tokens = tokenizer.encode(every_byte);
  BOOST_TEST_REQUIRE(tokens.size() == 256u);
  for (int b = 0; b < 256; ++b) BOOST_TEST(tokens[static_cast<std::size_t>(b)] == b);
  BOOST_TEST(tokenizer.decode(tokens) == every_byte);  // NUL, controls, invalid UTF-8: raw bytes back
  BOOST_TEST(tokenizer.encode("h\xc3\xa9") == (std::vector<int32_t>{104, 0xc3, 0xa9}), boost::test_tools::per_element());
  const std::vector<int64_t> wide = {104, 105};
  BOOST_TEST(tokenizer.decode(wide) == "hi");
  BOOST_CHECK_EXCEPTION(tokenizer.decode(std::vector<int32_t>{65, 256}), DataError, [](const DataError& e) {
    return std::string(e.what()).find("token 256 at position 1 is not a byte") != std::string::npos;
  });
  BOOST_CHECK_THROW(tokenizer.decode(std::vector<int64_t>{-1}), DataError);
}

// ---- fuzzing the reader ----------------------------------------------------------------------

// Thousands of damaged copies of a valid dataset (bytes of the .idx overwritten, the .idx cut
// or extended, the .bin resized): each one either opens, and then every sequence and document
// reads back inside the .bin with the counts agreeing, or is refused with a DataError naming the
// file. Nothing else may happen: no crash, no other exception.
BOOST_AUTO_TEST_CASE(damaged_files_are_refused_or_read_safely) {
  plexus::test::TempDir dir;
  IdxSpec spec;
  spec.lengths = {3, 1, 2, 5, 4};
  spec.documents = {0, 2, 3, 5};
  const std::string good_idx = spec.bytes();
  const std::string good_bin = uint16_bin({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  std::mt19937_64 random(20261121);
  const auto below = [&](std::size_t n) { return static_cast<std::size_t>(random() % n); };
  int opened = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string idx = good_idx, bin = good_bin;
    switch (trial % 4) {
      case 0:  // a few bytes anywhere
      case 1:
        for (std::size_t k = 0, n = 1 + below(4); k < n; ++k)
          idx[below(idx.size())] = static_cast<char>(random());
        break;
      case 2:  // a byte inside the counts, lengths and pointers, where the arithmetic happens
        idx[9 + below(idx.size() - 9)] = static_cast<char>(random() % 2 == 0 ? 0xff : 0x7f);
        break;
      case 3:  // sizes: the .idx cut or extended, the .bin resized; or token values changed
        if (const auto what = random() % 3; what == 0)
          idx.resize(below(idx.size() + 16), '\x01');
        else if (what == 1)
          bin.resize(below(bin.size() + 16), '\x02');
        else
          bin[below(bin.size())] = static_cast<char>(random());
        break;
    }
    const fs::path prefix = dir.path() / "fuzz";
    write_file(plexus::data::idx_path(prefix), idx);
    write_file(plexus::data::bin_path(prefix), bin);
    try {
      const IndexedDataset dataset(prefix);
      ++opened;
      const std::size_t itemsize = plexus::data::dtype_size(dataset.dtype());
      BOOST_TEST_REQUIRE(dataset.token_count() * itemsize == bin.size(), "trial " << trial);
      uint64_t tokens = 0;
      for (std::size_t s = 0; s < dataset.sequence_count(); ++s)
        tokens += dataset.sequence(s).to_vector().size();
      BOOST_TEST_REQUIRE(tokens == dataset.token_count(), "trial " << trial);
      uint64_t in_documents = 0;
      for (std::size_t d = 0; d < dataset.document_count(); ++d) in_documents += dataset.document(d).size();
      BOOST_TEST_REQUIRE(in_documents == dataset.token_count(), "trial " << trial);
    } catch (const DataError& e) {
      ++refused;
      const std::string message = e.what();
      BOOST_TEST_REQUIRE(
          (message.find("fuzz.idx") != std::string::npos || message.find("fuzz.bin") != std::string::npos),
          "trial " << trial << ": the refusal names no file: " << message);
    }
  }
  BOOST_TEST_MESSAGE("damaged datasets: " << opened << " opened and read, " << refused << " refused");
  BOOST_TEST(refused > 2000);  // damage to the .idx or a size is caught...
  BOOST_TEST(opened > 100);    // ...and changed token values are just other tokens
}

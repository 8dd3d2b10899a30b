// Checkpoints that cannot rot silently: XXH64 against the reference implementation's values; the
// writer records every tensor's checksum (streamed and filled tensors alike) and other tools'
// readers are untouched by it; a byte flipped in a real checkpoint file on disk, a NaN or an
// infinity, a state.json or a file of another step, a tensor count other than the one recorded
// are each refused by load_checkpoint naming the file and the tensor; a file written before
// checksums existed still loads; a FIFO in place of a checkpoint file is refused, not waited on.
#define BOOST_TEST_MODULE checkpoint_integrity
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/integrity.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/xxhash64.hpp"
#include "temp_dir.hpp"

namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;
using plexus::CheckpointError;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<char> read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_all(const fs::path& file, const std::vector<char>& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A tiny model's tensors: weight [2, 3] and bias [2] in the model file, one moment in the other.
struct Tensors {
  std::vector<float> weight{0.5f, -1.25f, 2.0f, 3.5f, -0.75f, 1.0f};
  std::vector<float> bias{0.25f, -0.25f};
  std::vector<float> exp_avg{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  std::vector<ck::TensorData> model() const {
    return {
        {"decoder.layers.0.mlp.linear_fc1.weight", ck::DType::f32, {2, 3}, std::as_bytes(std::span(weight))},
        {"decoder.layers.0.mlp.linear_fc1.bias", ck::DType::f32, {2}, std::as_bytes(std::span(bias))}};
  }
  std::vector<ck::TensorData> optimizer() const {
    return {{"decoder.layers.0.mlp.linear_fc1.weight.exp_avg",
             ck::DType::f32,
             {2, 3},
             std::as_bytes(std::span(exp_avg))}};
  }
  fs::path write(const fs::path& root, std::int64_t step) const {
    return ck::write_checkpoint(root, step, model(), optimizer(), boost::json::object{{"step", step}});
  }
};

// The offset in the file of the first byte of a tensor's data.
std::size_t data_offset(const fs::path& file, const std::string& tensor) {
  const auto f = ck::SafetensorsFile::open(file, ck::ReadMode::read);
  return static_cast<std::size_t>(f.layout().data_start() + f.info(tensor).begin);
}

std::string load_error(const fs::path& dir) {
  try {
    (void)ck::load_checkpoint(dir);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(xxh64_matches_the_reference_implementation) {
  // Values from the reference library (libxxhash 0.8.1, XXH64) for the bytes (i * 7 + 3) & 255:
  // every length class of the algorithm (under 4, 4..7, 8..31, the 32-byte stripes, a tail of
  // each size) and a non-zero seed.
  std::vector<std::byte> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 7 + 3) & 255U);
  struct Case {
    std::size_t n;
    std::uint64_t seed;
    std::uint64_t expected;
  };
  const std::array<Case, 10> cases{{{0, 0, 0xef46db3751d8e999ULL},
                                    {1, 0, 0x1f25c8d0bc1f4bb6ULL},
                                    {3, 0, 0x31d2363f52e564c9ULL},
                                    {4, 0, 0x9bb64b7d66ee9fdaULL},
                                    {9, 0, 0x170bb6bf975b4c02ULL},
                                    {32, 0, 0x23c3c17ef790fd97ULL},
                                    {33, 0, 0x50a7cfc7ba588784ULL},
                                    {100, 0, 0xa61f8d4c170fe531ULL},
                                    {1000, 0, 0x5f235fa033f1a3fbULL},
                                    {1000, 0x9E3779B97F4A7C15ULL, 0x442acd0a822e86f6ULL}}};
  for (const Case& c : cases) {
    BOOST_TEST_INFO("length " << c.n << ", seed " << c.seed);
    BOOST_TEST(plexus::xxh64(std::span(data).first(c.n), c.seed) == c.expected);
  }
  BOOST_TEST(plexus::xxh64(std::string_view("abc")) == 0x44bc2cf5ad770999ULL);
  BOOST_TEST(plexus::hex64(0x44bc2cf5ad770999ULL) == "44bc2cf5ad770999");
  std::uint64_t parsed = 0;
  BOOST_TEST(plexus::parse_hex64("44BC2CF5AD770999", parsed));
  BOOST_TEST(parsed == 0x44bc2cf5ad770999ULL);
  BOOST_TEST(!plexus::parse_hex64("44bc2cf5ad77099", parsed));
  BOOST_TEST(!plexus::parse_hex64("44bc2cf5ad77099g", parsed));
}

BOOST_AUTO_TEST_CASE(the_writer_records_each_tensors_checksum_for_bytes_and_fills_alike) {
  const std::vector<float> a{1, 2, 3};
  const std::vector<std::int16_t> b{7, -7};
  ck::SafetensorsWriter w;
  w.add("a", ck::DType::f32, {3}, std::as_bytes(std::span(a)));
  ck::TensorData filled{"b", ck::DType::i16, {2}, {}};
  int fills = 0;
  filled.fill = [&](std::span<std::byte> out) {
    ++fills;
    std::memcpy(out.data(), b.data(), out.size());
  };
  w.add(filled);
  w.set_metadata(ck::kChecksumKey, "stale value copied from another file");  // replaced
  const std::size_t header_size = w.header().size();
  const auto bytes = w.to_bytes();
  BOOST_TEST(fills == 1);
  const auto f = ck::SafetensorsFile::from_bytes(bytes, "memory");
  BOOST_TEST(f.layout().header_size == header_size);  // the placeholders had the final size
  const auto sums = ck::recorded_checksums(f);
  BOOST_TEST_REQUIRE(sums.has_value());
  BOOST_TEST(sums->size() == 2U);
  BOOST_TEST(sums->at("a") == plexus::xxh64(std::as_bytes(std::span(a))));
  BOOST_TEST(sums->at("b") == plexus::xxh64(std::as_bytes(std::span(b))));
  const ck::FileCheck check = ck::verify_file(f);
  BOOST_TEST(check.has_checksums);
  BOOST_TEST(check.tensors == 2U);
  BOOST_TEST(check.problems.empty());
  // The form for sinks that cannot rewrite gives the same bytes.
  fills = 0;
  std::vector<std::byte> streamed;
  w.write_to([&](std::span<const std::byte> s) { streamed.insert(streamed.end(), s.begin(), s.end()); });
  BOOST_TEST(fills == 1);
  BOOST_TEST((streamed == bytes));
  // Other readers see one more string in "__metadata__", as the format allows.
  const auto header =
      boost::json::parse(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, header_size));
  BOOST_TEST(header.at("__metadata__").at(ck::kChecksumKey).is_string());
}

BOOST_AUTO_TEST_CASE(a_flipped_bit_in_a_checkpoint_file_on_disk_is_refused_naming_the_file_and_tensor) {
  plexus::test::TempDir tmp;
  const fs::path dir = Tensors().write(tmp.path() / "root", 10);
  BOOST_TEST_REQUIRE(load_error(dir).empty());
  const fs::path model = dir / ck::kModelFile;
  // One bit of the bias's second float, in place: the size (which COMPLETE records) is unchanged.
  std::vector<char> bytes = read_all(model);
  const std::size_t at = data_offset(model, "decoder.layers.0.mlp.linear_fc1.bias") + 5;
  bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
  write_all(model, bytes);
  const std::string message = load_error(dir);
  BOOST_TEST(contains(message, model.string()), message);
  BOOST_TEST(contains(message, "tensor decoder.layers.0.mlp.linear_fc1.bias:"), message);
  BOOST_TEST(contains(message, "do not match the checksum recorded"), message);
  BOOST_TEST(!contains(message, "linear_fc1.weight"), message);  // only the damaged tensor is named
  // The structure alone (what inspect shows without --verify) still loads.
  const auto loaded = ck::load_checkpoint(dir, ck::ReadMode::map, ck::Verify::structure);
  const ck::CheckpointCheck check = ck::verify_checkpoint(loaded);
  BOOST_TEST(!check.ok());
  BOOST_TEST(check.problems().size() == 1U);
}

BOOST_AUTO_TEST_CASE(non_finite_values_are_refused_naming_the_tensor_and_the_first_bad_element) {
  plexus::test::TempDir tmp;
  Tensors t;
  t.weight[4] = std::numeric_limits<float>::infinity();
  t.weight[5] = std::numeric_limits<float>::quiet_NaN();
  const fs::path dir = t.write(tmp.path() / "root", 3);  // written that way: the checksums match
  const std::string message = load_error(dir);
  BOOST_TEST(contains(message, (dir / ck::kModelFile).string()), message);
  BOOST_TEST(
      contains(message, "tensor decoder.layers.0.mlp.linear_fc1.weight: element 4 (index [1, 1]) is inf"),
      message);
  BOOST_TEST(!contains(message, "checksum"), message);
  Tensors n;
  n.exp_avg[0] = -std::numeric_limits<float>::infinity();
  const std::string moment = load_error(n.write(tmp.path() / "other", 3));
  BOOST_TEST(contains(moment,
                      "optimizer.safetensors: tensor decoder.layers.0.mlp.linear_fc1.weight.exp_avg: "
                      "element 0 (index [0, 0]) is -inf"),
             moment);
}

BOOST_AUTO_TEST_CASE(every_floating_point_dtype_is_scanned_for_non_finite_values) {
  const auto view = [](ck::DType dtype, std::vector<std::int64_t>& shape,
                       const std::vector<std::uint8_t>& bytes) {
    return ck::TensorView{"t", dtype, shape, std::as_bytes(std::span(bytes))};
  };
  std::vector<std::int64_t> two{2};
  // bf16 1.0 then +inf; f16 -inf; bf16 NaN; F8_E5M2 inf; F8_E4M3 (no infinities) NaN; F64 NaN.
  const auto first = [&](ck::DType dtype, const std::vector<std::uint8_t>& bytes) {
    return ck::first_non_finite(view(dtype, two, bytes)).value_or("finite");
  };
  BOOST_TEST(first(ck::DType::bf16, {0x80, 0x3F, 0x80, 0x7F}) == "element 1 (index [1]) is inf");
  BOOST_TEST(first(ck::DType::f16, {0x00, 0x3C, 0x00, 0xFC}) == "element 1 (index [1]) is -inf");
  BOOST_TEST(first(ck::DType::bf16, {0xC1, 0x7F, 0x80, 0x3F}) == "element 0 (index [0]) is nan");
  BOOST_TEST(first(ck::DType::f8_e5m2, {0x3C, 0x7C}) == "element 1 (index [1]) is inf");
  BOOST_TEST(first(ck::DType::f8_e4m3, {0x7E, 0xFF}) == "element 1 (index [1]) is nan");  // 0x7E: 448
  BOOST_TEST(first(ck::DType::f16, {0xFF, 0x7B, 0x00, 0x00}) == "finite");                // 65504
  std::vector<std::uint8_t> f64(16, 0);
  f64[14] = 0xF8;  // element 1: 0x7FF8000000000000, a quiet NaN
  f64[15] = 0x7F;
  BOOST_TEST(first(ck::DType::f64, f64) == "element 1 (index [1]) is nan");
  BOOST_TEST(first(ck::DType::i32, {0xFF, 0xFF, 0x80, 0x7F}) == "finite");  // not floating point
}

BOOST_AUTO_TEST_CASE(a_file_written_before_checksums_existed_still_loads) {
  plexus::test::TempDir tmp;
  const fs::path dir = Tensors().write(tmp.path() / "root", 7);
  // The model file as a writer without checksums made it: the same tensors and data, the header
  // without the checksum entry (padded again to 8 bytes), the COMPLETE marker's size updated.
  const fs::path model = dir / ck::kModelFile;
  std::vector<char> bytes = read_all(model);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  boost::json::object header = boost::json::parse(std::string(bytes.data() + 8, n)).as_object();
  header.at("__metadata__").as_object().erase(ck::kChecksumKey);
  std::string text = boost::json::serialize(header);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::array<char, 8> length{};
  const std::uint64_t size = text.size();
  std::memcpy(length.data(), &size, 8);
  std::string legacy(length.data(), length.size());
  legacy += text;
  legacy.append(bytes.data() + 8 + n, bytes.size() - 8 - n);
  write_all(model, std::vector<char>(legacy.begin(), legacy.end()));
  boost::json::object marker = boost::json::parse(std::string(read_all(dir / ck::kCompleteMarker).data(),
                                                              read_all(dir / ck::kCompleteMarker).size()))
                                   .as_object();
  marker.at("files").as_object()[ck::kModelFile] = legacy.size();
  std::ofstream(dir / ck::kCompleteMarker, std::ios::trunc) << boost::json::serialize(marker) << "\n";

  const auto loaded = ck::load_checkpoint(dir);
  BOOST_TEST(loaded.step == 7);
  BOOST_TEST(!ck::recorded_checksums(loaded.model).has_value());
  const ck::CheckpointCheck check = ck::verify_checkpoint(loaded);
  BOOST_TEST(check.ok());
  BOOST_TEST(!check.files.at(0).has_checksums);
  BOOST_TEST(check.files.at(1).has_checksums);
}

BOOST_AUTO_TEST_CASE(state_json_and_files_of_another_step_are_refused_naming_them) {
  plexus::test::TempDir tmp;
  const Tensors t;
  const fs::path dir4 = t.write(tmp.path() / "root", 4);
  const fs::path dir5 = t.write(tmp.path() / "root", 5);
  // state.json of step 4 in the checkpoint of step 5 (same size: the marker still agrees).
  fs::copy_file(dir4 / ck::kStateFile, dir5 / ck::kStateFile, fs::copy_options::overwrite_existing);
  std::string message = load_error(dir5);
  BOOST_TEST(
      contains(message, (dir5 / ck::kStateFile).string() + ": records step 4, but the tensors are of step 5"),
      message);
  // The model file of step 4 (metadata plexus.step 4; same size) in the checkpoint of step 5.
  fs::copy_file(dir5 / ck::kStateFile, tmp.path() / "state5", fs::copy_options::overwrite_existing);
  t.write(tmp.path() / "root", 5);  // fresh step 5
  fs::copy_file(dir4 / ck::kModelFile, dir5 / ck::kModelFile, fs::copy_options::overwrite_existing);
  message = load_error(dir5);
  BOOST_TEST(contains(message, (dir5 / ck::kModelFile).string() + ": its metadata records step 4, but"),
             message);
}

BOOST_AUTO_TEST_CASE(a_tensor_count_other_than_the_one_recorded_is_refused) {
  plexus::test::TempDir tmp;
  const fs::path dir = Tensors().write(tmp.path() / "root", 2);
  boost::json::object marker = boost::json::parse(std::string(read_all(dir / ck::kCompleteMarker).data(),
                                                              read_all(dir / ck::kCompleteMarker).size()))
                                   .as_object();
  BOOST_TEST(marker.at("tensors").at(ck::kModelFile).as_int64() == 2);
  BOOST_TEST(marker.at("tensors").at(ck::kOptimizerFile).as_int64() == 1);
  marker.at("tensors").as_object()[ck::kOptimizerFile] = 3;
  std::ofstream(dir / ck::kCompleteMarker, std::ios::trunc) << boost::json::serialize(marker) << "\n";
  const std::string message = load_error(dir);
  BOOST_TEST(contains(message, (dir / ck::kOptimizerFile).string() + ": 1 tensors, but"), message);
  BOOST_TEST(contains(message, "records 3"), message);
}

BOOST_AUTO_TEST_CASE(a_fifo_in_place_of_a_checkpoint_file_is_refused_without_waiting) {
  plexus::test::TempDir tmp;
  const fs::path dir = Tensors().write(tmp.path() / "root", 1);
  // Opening a FIFO for reading blocks until a writer comes: a forgotten check would hang here,
  // so the alarm turns a hang into a failure.
  ::alarm(60);
  const fs::path model = dir / ck::kModelFile;
  fs::remove(model);
  BOOST_TEST_REQUIRE(::mkfifo(model.c_str(), 0600) == 0);
  BOOST_CHECK_EXCEPTION(
      (void)ck::SafetensorsFile::open(model), CheckpointError, [&](const CheckpointError& e) {
        return e.file() == model.string() && contains(e.problem(), "a FIFO (named pipe), not a regular file");
      });
  BOOST_TEST(!load_error(dir).empty());
  const fs::path state = dir / ck::kStateFile;
  fs::remove(state);
  BOOST_TEST_REQUIRE(::mkfifo(state.c_str(), 0600) == 0);
  BOOST_TEST(!load_error(dir).empty());
  ::alarm(0);
}

// Safetensors writer and reader: round trips, a file built by hand from the format's
// description, every corruption the reader must refuse (each with its own message), and atomic
// writes that leave the old file alone when they fail.
#define BOOST_TEST_MODULE safetensors
#include <boost/test/unit_test.hpp>

#include <boost/json/parse.hpp>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/atomic_file.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "temp_dir.hpp"

namespace plexus::checkpoint {
// For BOOST_TEST messages.
inline std::ostream& operator<<(std::ostream& out, DType dtype) { return out << to_string(dtype); }
}  // namespace plexus::checkpoint

namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;
using plexus::CheckpointError;

namespace {

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

template <class T>
std::vector<T> values_of(std::span<const std::byte> bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<std::byte> le64(std::uint64_t n) {
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i, n >>= 8U) out.push_back(static_cast<std::byte>(n & 0xFFU));
  return out;
}

// A file made by hand: the 8-byte length, the header text exactly as given, then data.
std::vector<std::byte> make_file(const std::string& header, const std::vector<std::byte>& data = {}) {
  std::vector<std::byte> file = le64(header.size());
  for (const char c : header) file.push_back(static_cast<std::byte>(c));
  file.insert(file.end(), data.begin(), data.end());
  return file;
}

std::vector<std::byte> zeros(std::size_t n) { return std::vector<std::byte>(n, std::byte{0}); }

void write_bytes(const fs::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The reader's error for bytes, or "" when they load.
std::string load_error(const std::vector<std::byte>& bytes) {
  try {
    (void)ck::SafetensorsFile::from_bytes(bytes, "bad.safetensors");
  } catch (const CheckpointError& e) {
    BOOST_TEST(e.file() == "bad.safetensors");
    BOOST_TEST(std::string(e.what()).starts_with("bad.safetensors: "));
    return e.problem();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

#define CHECK_LOAD_ERROR(bytes, part)                                          \
  do {                                                                         \
    const std::string error_ = load_error(bytes);                              \
    BOOST_TEST_INFO("error: " << error_);                                      \
    BOOST_TEST(contains(error_, part));                                        \
  } while (false)

// The files in dir, to check no temporary file was left behind.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

const std::string kGoodHeader = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

}  // namespace

// ------------------------------------------------------------------ round trips ---

BOOST_AUTO_TEST_CASE(round_trip_of_every_dtype_with_scalars_empty_tensors_and_metadata) {
  const std::vector<double> f64{1.5, -2.25, 1e300};
  const std::vector<float> f32{1, 2, 3, 4, 5, 6};
  const std::vector<std::uint16_t> f16{0x3C00, 0xC000};  // 1.0, -2.0 as half bits
  const std::vector<std::uint16_t> bf16{0x3F80};         // 1.0 as bfloat16 bits
  const std::vector<std::int64_t> i64{-1, INT64_MAX};
  const std::vector<std::int32_t> i32{7};
  const std::vector<std::int16_t> i16{-3, 3};
  const std::vector<std::int8_t> i8{-128, 127, 0};
  const std::vector<std::uint8_t> u8{255};
  const std::vector<std::uint8_t> boolean{1, 0, 1};
  const std::vector<std::uint64_t> u64{UINT64_MAX};
  const std::vector<std::uint32_t> u32{42};
  const std::vector<std::uint16_t> u16{65535};
  const std::vector<std::uint8_t> f8{0x38, 0x3C};
  const std::vector<float> none;

  ck::SafetensorsWriter w;
  w.add("f64", ck::DType::f64, {3}, bytes_of(f64));
  w.add("layer.weight", ck::DType::f32, {2, 3}, bytes_of(f32));
  w.add("half", ck::DType::f16, {2}, bytes_of(f16));
  w.add("scalar.bf16", ck::DType::bf16, {}, bytes_of(bf16));
  w.add("i64", ck::DType::i64, {2}, bytes_of(i64));
  w.add("scalar.i32", ck::DType::i32, {}, bytes_of(i32));
  w.add("i16", ck::DType::i16, {2, 1}, bytes_of(i16));
  w.add("i8", ck::DType::i8, {3}, bytes_of(i8));
  w.add("u8", ck::DType::u8, {1, 1, 1}, bytes_of(u8));
  w.add("mask", ck::DType::boolean, {3}, bytes_of(boolean));
  w.add("u64", ck::DType::u64, {1}, bytes_of(u64));
  w.add("u32", ck::DType::u32, {1}, bytes_of(u32));
  w.add("u16", ck::DType::u16, {1}, bytes_of(u16));
  w.add("e4m3", ck::DType::f8_e4m3, {2}, bytes_of(f8));
  w.add("e5m2", ck::DType::f8_e5m2, {1, 2}, bytes_of(f8));
  w.add("empty", ck::DType::f32, {0, 3}, bytes_of(none));
  w.set_metadata("format", "pt");
  w.set_metadata("step", "12");
  BOOST_TEST(w.tensor_count() == 16U);

  plexus::test::TempDir dir;
  const fs::path file = dir.path() / "all.safetensors";
  w.write(file);
  BOOST_TEST(fs::file_size(file) == w.file_size());
  BOOST_TEST((entries(dir.path()) == std::vector<std::string>{"all.safetensors"}));

  for (const auto mode : {ck::ReadMode::map, ck::ReadMode::read}) {
    const auto f = ck::SafetensorsFile::open(file, mode);
    BOOST_TEST(f.size() == 16U);
    BOOST_TEST(f.path() == file);
    BOOST_TEST(f.metadata().at("format") == "pt");
    BOOST_TEST(f.metadata().at("step") == "12");
    BOOST_TEST(f.names().front() == "e4m3");  // sorted
    const auto w32 = f.tensor("layer.weight");
    BOOST_TEST(w32.dtype == ck::DType::f32);
    BOOST_TEST((std::vector<std::int64_t>(w32.shape.begin(), w32.shape.end()) == std::vector<std::int64_t>{2, 3}));
    BOOST_TEST(values_of<float>(w32.bytes) == f32);
    BOOST_TEST(values_of<double>(f.tensor("f64").bytes) == f64);
    BOOST_TEST(values_of<std::uint16_t>(f.tensor("half").bytes) == f16);
    const auto scalar = f.tensor("scalar.bf16");
    BOOST_TEST(scalar.shape.empty());
    BOOST_TEST(values_of<std::uint16_t>(scalar.bytes) == bf16);
    BOOST_TEST(values_of<std::int32_t>(f.tensor("scalar.i32").bytes) == i32);
    BOOST_TEST(values_of<std::int64_t>(f.tensor("i64").bytes) == i64);
    BOOST_TEST(values_of<std::int16_t>(f.tensor("i16").bytes) == i16);
    BOOST_TEST(values_of<std::int8_t>(f.tensor("i8").bytes) == i8);
    BOOST_TEST(values_of<std::uint8_t>(f.tensor("u8").bytes) == u8);
    BOOST_TEST(values_of<std::uint8_t>(f.tensor("mask").bytes) == boolean);
    BOOST_TEST(f.tensor("mask").dtype == ck::DType::boolean);
    BOOST_TEST(values_of<std::uint64_t>(f.tensor("u64").bytes) == u64);
    BOOST_TEST(values_of<std::uint32_t>(f.tensor("u32").bytes) == u32);
    BOOST_TEST(values_of<std::uint16_t>(f.tensor("u16").bytes) == u16);
    BOOST_TEST(values_of<std::uint8_t>(f.tensor("e4m3").bytes) == f8);
    BOOST_TEST(f.tensor("e5m2").dtype == ck::DType::f8_e5m2);
    const auto empty = f.tensor("empty");
    BOOST_TEST(empty.bytes.empty());
    BOOST_TEST(empty.shape.size() == 2U);
    BOOST_TEST(f.tensors().size() == 16U);
  }
  // The same bytes through the in-memory path.
  const auto mem = ck::SafetensorsFile::from_bytes(w.to_bytes(), "memory");
  BOOST_TEST(values_of<float>(mem.tensor("layer.weight").bytes) == f32);
}

BOOST_AUTO_TEST_CASE(writer_aligns_the_data_and_every_tensor_to_its_element_size) {
  const std::vector<std::uint8_t> one{1};
  const std::vector<double> d{1.0, 2.0};
  const std::vector<std::uint16_t> h{1, 2, 3};
  const std::vector<float> f{1, 2, 3};
  ck::SafetensorsWriter w;
  w.add("a.byte", ck::DType::u8, {1}, bytes_of(one));  // added first, stored last
  w.add("b.half", ck::DType::f16, {3}, bytes_of(h));
  w.add("c.float", ck::DType::f32, {3}, bytes_of(f));
  w.add("d.double", ck::DType::f64, {2}, bytes_of(d));
  w.set_metadata("k", "v");
  BOOST_TEST(w.header().size() % 8 == 0U);
  BOOST_TEST(w.header().back() == ' ');  // padding is spaces (this header needs some)
  const auto f2 = ck::SafetensorsFile::from_bytes(w.to_bytes(), "aligned");
  BOOST_TEST(f2.layout().data_start() % 8 == 0U);
  for (const auto& t : f2.layout().tensors) BOOST_TEST(t.begin % ck::dtype_size(t.dtype) == 0U);
  BOOST_TEST(f2.layout().tensors.front().name == "d.double");
  BOOST_TEST(f2.layout().tensors.back().name == "a.byte");
  // The header is plain JSON with the documented fields.
  const auto json = boost::json::parse(w.header());
  BOOST_TEST(json.at("c.float").at("dtype").as_string() == "F32");
  BOOST_TEST(json.at("__metadata__").at("k").as_string() == "v");
}

BOOST_AUTO_TEST_CASE(a_file_with_no_tensors_round_trips) {
  ck::SafetensorsWriter w;
  const auto f = ck::SafetensorsFile::from_bytes(w.to_bytes(), "empty");
  BOOST_TEST(f.size() == 0U);
  BOOST_TEST(f.metadata().empty());
}

BOOST_AUTO_TEST_CASE(a_file_built_byte_by_byte_from_the_format_description_loads) {
  // Written out here instead of by the writer: unpadded header, metadata last, tensors listed
  // out of storage order, one I32 matrix and an I8 scalar after it (unaligned: allowed).
  const std::string header =
      R"({"b":{"dtype":"I8","shape":[],"data_offsets":[16,17]},)"
      R"("test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"foo":"bar"}})";
  std::vector<std::byte> file{std::byte{static_cast<unsigned char>(header.size())}, std::byte{0}, std::byte{0},
                              std::byte{0},  std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0}};
  for (const char c : header) file.push_back(static_cast<std::byte>(c));
  // 1, 2, 3, 4 as little-endian int32, then -1 as int8.
  const std::array<unsigned char, 17> data{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0xFF};
  for (const unsigned char b : data) file.push_back(std::byte{b});
  BOOST_TEST(header.size() < 256U);

  plexus::test::TempDir dir;
  const fs::path path = dir.path() / "hand.safetensors";
  write_bytes(path, file);
  const auto f = ck::SafetensorsFile::open(path);
  BOOST_TEST((f.names() == std::vector<std::string>{"b", "test"}));
  BOOST_TEST(f.metadata().at("foo") == "bar");
  BOOST_TEST(f.info("test").dtype == ck::DType::i32);
  BOOST_TEST((f.info("test").shape == std::vector<std::int64_t>{2, 2}));
  BOOST_TEST((values_of<std::int32_t>(f.tensor("test").bytes) == std::vector<std::int32_t>{1, 2, 3, 4}));
  BOOST_TEST((values_of<std::int8_t>(f.tensor("b").bytes) == std::vector<std::int8_t>{-1}));
  BOOST_TEST(f.layout().header_size == header.size());
  // Trailing spaces in the header are allowed by the format.
  BOOST_TEST(load_error(make_file(kGoodHeader + "     ", zeros(8))) == "");
}

BOOST_AUTO_TEST_CASE(lookups_of_unknown_tensors_name_the_file_and_the_tensor) {
  const auto f = ck::SafetensorsFile::from_bytes(make_file(kGoodHeader, zeros(8)), "x.safetensors");
  BOOST_TEST(!f.contains("b"));
  BOOST_CHECK_EXCEPTION((void)f.tensor("b"), CheckpointError, [](const CheckpointError& e) {
    return std::string(e.what()) == "x.safetensors: no tensor named 'b'";
  });
}

// ------------------------------------------------------------------ corruptions ---

BOOST_AUTO_TEST_CASE(truncated_files_are_refused_wherever_they_are_cut) {
  const std::vector<float> a{1, 2, 3, 4};
  const std::vector<float> b{5, 6};
  ck::SafetensorsWriter w;
  w.add("a", ck::DType::f32, {4}, bytes_of(a));
  w.add("b", ck::DType::f32, {2}, bytes_of(b));
  const auto full = w.to_bytes();
  const std::size_t header_end = 8 + w.header().size();
  BOOST_TEST(load_error(full) == "");
  const auto cut = [&](std::size_t n) { return std::vector<std::byte>(full.begin(), full.begin() + static_cast<long>(n)); };
  for (const std::size_t n : {0UL, 1UL, 7UL}) CHECK_LOAD_ERROR(cut(n), "too short for the 8-byte header length");
  for (const std::size_t n : {8UL, 9UL, header_end / 2, header_end - 1})
    CHECK_LOAD_ERROR(cut(n), "is larger than the rest of the file");
  // Inside the data: the last tensor ends past the buffer.
  for (const std::size_t n : {header_end, header_end + 4, full.size() - 1})
    CHECK_LOAD_ERROR(cut(n), "end past the data buffer");
  // Bytes after the last tensor are as wrong as missing ones.
  auto longer = full;
  longer.push_back(std::byte{0});
  CHECK_LOAD_ERROR(longer, "belong to no tensor (after 'b')");
}

BOOST_AUTO_TEST_CASE(headers_that_are_not_a_json_object_are_refused) {
  CHECK_LOAD_ERROR(make_file(""), "header length is 0");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32",)"), "header is not valid JSON");
  CHECK_LOAD_ERROR(make_file("not json at all"), "header is not valid JSON");
  CHECK_LOAD_ERROR(make_file(R"({"a":1} trailing)"), "header is not valid JSON");
  CHECK_LOAD_ERROR(make_file(R"({"a":{}, /* comment */ })"), "header is not valid JSON");
  CHECK_LOAD_ERROR(make_file("[1, 2]"), "header is not a JSON object (found an array)");
  CHECK_LOAD_ERROR(make_file("\"text\""), "header is not a JSON object (found a string)");
  CHECK_LOAD_ERROR(make_file(" " + kGoodHeader, zeros(8)), "header starts with whitespace");
  std::string nul_padded = kGoodHeader;
  nul_padded.push_back('\0');
  CHECK_LOAD_ERROR(make_file(nul_padded, zeros(8)), "header is not valid JSON");
  CHECK_LOAD_ERROR(make_file("{\"\xFF\":1}"), "header is not valid JSON");  // not UTF-8
}

BOOST_AUTO_TEST_CASE(tensor_entries_with_missing_or_ill_typed_fields_are_refused) {
  CHECK_LOAD_ERROR(make_file(R"({"a":{"shape":[2]}})"), "tensor 'a': entry is missing \"dtype\", \"data_offsets\"");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", zeros(8)),
                   "tensor 'a': entry is missing \"shape\"");
  CHECK_LOAD_ERROR(make_file(R"({"a":[1,2]})"), "tensor 'a': entry must be an object, found an array");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", zeros(8)),
                   "\"dtype\" must be a string, found a number");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", zeros(8)),
                   "\"shape\" must be an array of integers >= 0, found [-2]");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", zeros(8)),
                   "\"shape\" must be an array of integers >= 0");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", zeros(8)),
                   "\"shape\" must be an array of integers >= 0, found a number");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", zeros(8)),
                   "\"data_offsets\" must be [begin, end] with integers 0 <= begin <= end, found [8,0]");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", zeros(8)),
                   "\"data_offsets\" must be [begin, end]");
  CHECK_LOAD_ERROR(make_file(R"({"__metadata__":{"k":1}})"), "\"__metadata__\" value of 'k' must be a string");
  CHECK_LOAD_ERROR(make_file(R"({"__metadata__":["k"]})"), "\"__metadata__\" must be an object of strings");
}

BOOST_AUTO_TEST_CASE(unknown_dtypes_are_refused_and_the_known_ones_listed) {
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", zeros(8)),
                   "tensor 'a': unknown dtype 'F12' (known: BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, "
                   "U32, F32, I64, U64, F64)");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", zeros(8)),
                   "unknown dtype 'f32'");
}

BOOST_AUTO_TEST_CASE(shapes_that_disagree_with_their_offsets_are_refused) {
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", zeros(8)),
                   "tensor 'a': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F64","shape":[],"data_offsets":[0,4]}})", zeros(4)),
                   "shape [] of F64 needs 8 bytes but data_offsets [0, 4] span 4");
  CHECK_LOAD_ERROR(
      make_file(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", zeros(8)),
      "is too large");
}

BOOST_AUTO_TEST_CASE(offsets_out_of_range_overlapping_or_leaving_holes_are_refused) {
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", zeros(8)),
                   "tensor 'a': data_offsets [0, 16] end past the data buffer (8 bytes)");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                             zeros(12)),
                   "tensors 'a' [0, 8) and 'b' [4, 12) overlap in the data buffer");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                             zeros(8)),
                   "overlap in the data buffer");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                             zeros(12)),
                   "bytes [4, 8) of the data buffer belong to no tensor (between 'a' and 'b')");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", zeros(8)),
                   "bytes [0, 4) of the data buffer belong to no tensor (before 'a')");
  CHECK_LOAD_ERROR(make_file(R"({"__metadata__":{}})", zeros(4)),
                   "bytes [0, 4) of the data buffer belong to no tensor (the header lists no tensors)");
  // An empty tensor takes no bytes and may sit at any boundary.
  BOOST_TEST(load_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                                  zeros(8))) == "");
}

BOOST_AUTO_TEST_CASE(repeated_names_and_keys_are_refused) {
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                             zeros(8)),
                   "header names tensor 'a' twice");
  CHECK_LOAD_ERROR(make_file(R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", zeros(4)),
                   "header entry 'a' has the key 'dtype' twice");
  CHECK_LOAD_ERROR(make_file(R"({"__metadata__":{"k":"1","k":"2"}})"), "header entry '__metadata__' has the key 'k' twice");
}

BOOST_AUTO_TEST_CASE(names_in_messages_are_made_printable) {
  CHECK_LOAD_ERROR(make_file("{\"a\\u0001b\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}"),
                   "tensor 'a\\x01b': unknown dtype 'X'");
}

BOOST_AUTO_TEST_CASE(opening_a_missing_or_non_regular_file_names_it) {
  plexus::test::TempDir dir;
  BOOST_CHECK_EXCEPTION((void)ck::SafetensorsFile::open(dir.path() / "none.safetensors"), CheckpointError,
                        [&](const CheckpointError& e) {
                          return e.file() == (dir.path() / "none.safetensors").string() &&
                                 e.problem() == "no such file";
                        });
  BOOST_CHECK_EXCEPTION(
      (void)ck::SafetensorsFile::open(dir.path()), CheckpointError,
      [](const CheckpointError& e) { return e.problem() == "a directory, not a regular file"; });
  const fs::path empty = dir.path() / "empty.safetensors";
  write_bytes(empty, {});
  for (const auto mode : {ck::ReadMode::map, ck::ReadMode::read})
    BOOST_CHECK_EXCEPTION((void)ck::SafetensorsFile::open(empty, mode), CheckpointError, [](const CheckpointError& e) {
      return contains(e.problem(), "file is 0 bytes");
    });
}

BOOST_AUTO_TEST_CASE(the_writer_refuses_inconsistent_tensors) {
  const std::vector<float> two{1, 2};
  ck::SafetensorsWriter w;
  const auto refused = [&](const std::string& name, std::vector<std::int64_t> shape, const std::string& part) {
    try {
      w.add(name, ck::DType::f32, std::move(shape), bytes_of(two));
    } catch (const std::invalid_argument& e) {
      BOOST_TEST_INFO("error: " << e.what());
      BOOST_TEST(contains(e.what(), part));
      return;
    }
    BOOST_ERROR("accepted " + name);
  };
  refused("a", {3}, "safetensors tensor 'a': shape [3] of F32 needs 12 bytes, given 8");
  refused("a", {-2}, "negative dimension");
  refused("__metadata__", {2}, "reserved");
  refused("", {2}, "the name is empty");
  w.add("a", ck::DType::f32, {2}, bytes_of(two));
  refused("a", {2}, "safetensors tensor 'a': added twice");
  BOOST_TEST(w.tensor_count() == 1U);
}

// ------------------------------------------------------------------ atomic writes ---

BOOST_AUTO_TEST_CASE(a_write_that_throws_midway_leaves_the_old_file_and_no_temporary) {
  plexus::test::TempDir dir;
  const fs::path file = dir.path() / "model.safetensors";
  const std::vector<float> old_values{1, 2};
  ck::SafetensorsWriter old_writer;
  old_writer.add("w", ck::DType::f32, {2}, bytes_of(old_values));
  old_writer.write(file);
  const std::string before = read_all(file);

  BOOST_CHECK_THROW(ck::write_file_atomically(file,
                                              [](ck::FileSink& sink) {
                                                sink.write(std::string(1000, 'x'));
                                                BOOST_TEST(sink.bytes_written() == 1000U);
                                                throw std::runtime_error("disk on fire");
                                              }),
                    std::runtime_error);
  BOOST_TEST(read_all(file) == before);
  BOOST_TEST((entries(dir.path()) == std::vector<std::string>{"model.safetensors"}));
  BOOST_TEST(values_of<float>(ck::SafetensorsFile::open(file).tensor("w").bytes) == old_values);

  // A successful write replaces it and keeps its permissions.
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  ck::write_file_atomically(file, std::string_view("new"));
  BOOST_TEST(read_all(file) == "new");
  BOOST_TEST((fs::status(file).permissions() ==
              (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read)));
  BOOST_TEST((entries(dir.path()) == std::vector<std::string>{"model.safetensors"}));
}

BOOST_AUTO_TEST_CASE(a_write_whose_directory_cannot_hold_it_names_the_path_and_the_reason) {
  plexus::test::TempDir dir;
  const fs::path not_a_dir = dir.write("plain", "I am a file");
  BOOST_CHECK_EXCEPTION(ck::write_file_atomically(not_a_dir / "x.safetensors", std::string_view("data")),
                        CheckpointError, [&](const CheckpointError& e) {
                          BOOST_TEST_INFO("error: " << e.what());
                          return e.file() == (not_a_dir / "x.safetensors").string() &&
                                 contains(e.problem(), "cannot create the temporary file") &&
                                 contains(e.problem(), "Not a directory");
                        });
  BOOST_TEST(read_all(not_a_dir) == "I am a file");

  // Renaming a file over a directory fails after the data is written: the temporary goes.
  const fs::path target_dir = dir.path() / "target";
  fs::create_directory(target_dir);
  BOOST_CHECK_EXCEPTION(ck::write_file_atomically(target_dir, std::string_view("data")), CheckpointError,
                        [](const CheckpointError& e) { return contains(e.problem(), "cannot rename"); });
  BOOST_TEST(fs::is_directory(target_dir));
  BOOST_TEST((entries(dir.path()) == std::vector<std::string>{"plain", "target"}));
}

BOOST_AUTO_TEST_CASE(a_failing_safetensors_write_keeps_the_previous_checkpoint_file) {
  plexus::test::TempDir dir;
  const fs::path file = dir.path() / "m.safetensors";
  const std::vector<float> v{1, 2, 3};
  ck::SafetensorsWriter w;
  w.add("v", ck::DType::f32, {3}, bytes_of(v));
  w.write(file);
  const std::string before = read_all(file);
  // The writer streams into the sink; a sink that fails after the header is a failed write.
  BOOST_CHECK_THROW(ck::write_file_atomically(file,
                                              [&](ck::FileSink& sink) {
                                                int calls = 0;
                                                w.write_to([&](std::span<const std::byte> bytes) {
                                                  if (++calls == 3) throw std::runtime_error("stream broke");
                                                  sink.write(bytes);
                                                });
                                              }),
                    std::runtime_error);
  BOOST_TEST(read_all(file) == before);
  BOOST_TEST((entries(dir.path()) == std::vector<std::string>{"m.safetensors"}));
}

BOOST_AUTO_TEST_CASE(every_prefix_and_every_single_byte_change_loads_or_throws_checkpoint_error) {
  // Whatever the damage, the reader answers with a CheckpointError (never a crash, another
  // exception type, or a view past the end).
  const std::vector<float> a{1, 2, 3};
  const std::vector<std::int8_t> b{4};
  ck::SafetensorsWriter w;
  w.add("a", ck::DType::f32, {3}, bytes_of(a));
  w.add("b", ck::DType::i8, {}, bytes_of(b));
  w.set_metadata("k", "v");
  const auto good = w.to_bytes();
  const auto outcome = [](const std::vector<std::byte>& bytes) {
    try {
      const auto f = ck::SafetensorsFile::from_bytes(bytes, "fuzz");
      std::size_t total = 0;
      for (const auto& t : f.tensors()) total += t.bytes.size();
      return total + f.layout().data_start() == bytes.size() ? 0 : 2;  // loaded: must be consistent
    } catch (const CheckpointError&) {
      return 1;
    } catch (...) {
      return 3;
    }
  };
  for (std::size_t n = 0; n < good.size(); ++n)
    BOOST_TEST(outcome(std::vector<std::byte>(good.begin(), good.begin() + static_cast<long>(n))) == 1);
  const std::size_t header_end = 8 + w.header().size();
  for (std::size_t i = 0; i < header_end; ++i) {
    for (const unsigned char v : std::array<unsigned char, 8>{0, ' ', '"', '0', '9', '{', 0x80, 0xFF}) {
      auto bytes = good;
      bytes[i] = std::byte{v};
      BOOST_TEST_INFO("byte " << i << " set to " << int(v));
      BOOST_TEST(outcome(bytes) <= 1);
    }
  }
}

// Files written by Plexus load in an independent reader: tests/reference/safetensors_check.py,
// written from the format's description (numpy; torch too when installed), must see the same
// names, dtypes, shapes and sums. Needs the SYSTEM python with numpy (a pyenv python earlier on
// PATH may lack it); without them the cases are reported as skipped, not passed.
#define BOOST_TEST_MODULE safetensors_python
#include <boost/test/unit_test.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "skip_module.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "run_process.hpp"
#include "temp_dir.hpp"

namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;
namespace tt = boost::test_tools;

namespace {

const std::string kPython = "/usr/bin/python3";
const std::string kScript = std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/safetensors_check.py";

bool python_can_import(const std::string& module) {
  if (!fs::exists(kPython)) return false;
  return plexus::test::run_process(kPython + " -c " + plexus::test::quote("import " + module)).status == 0;
}


template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// What the script should report for one tensor.
struct Expected {
  std::string dtype;
  std::vector<std::int64_t> shape;
  boost::json::value sum;  // int64 / uint64 for integer types (exact), double for floats
};

plexus::test::ProcessResult run_script(const fs::path& file) {
  return plexus::test::run_process(kPython + " " + plexus::test::quote(kScript) + " " +
                                   plexus::test::quote(file.string()));
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(python_can_import("numpy"), "the system python cannot import numpy (Debian: python3-numpy)")

BOOST_AUTO_TEST_CASE(every_dtype_written_by_plexus_reads_back_in_python) {
  const std::vector<float> f32{1, 2, 3, 4, 5, 6.5f};
  const std::vector<double> f64{0.125, -1e10, 3};
  const std::vector<std::uint16_t> f16{0x3C00, 0xC000, 0x3800};  // 1, -2, 0.5
  const std::vector<std::uint16_t> bf16{0x3F80};                 // 1 (a scalar)
  const std::vector<std::uint16_t> bf16_row{0x4040, 0xBF00};     // 3, -0.5
  const std::vector<std::int64_t> i64{-5, (std::int64_t{1} << 53) + 1};  // not exact as a double
  const std::vector<std::uint64_t> u64{std::numeric_limits<std::uint64_t>::max()};
  const std::vector<std::int32_t> i32{-7, 100000};
  const std::vector<std::uint32_t> u32{4000000000U};
  const std::vector<std::int16_t> i16{-300, 3};
  const std::vector<std::uint16_t> u16{65535, 1};
  const std::vector<std::int8_t> i8{-128, 127, -1};
  const std::vector<std::uint8_t> u8{200, 100};
  const std::vector<std::uint8_t> boolean{1, 0, 1, 1};
  const std::vector<std::uint8_t> e4m3{0x38, 0x3C};  // 1, 1.5
  const std::vector<std::uint8_t> e5m2{0x3C, 0x38};  // 1, 0.5
  const std::vector<float> none;

  ck::SafetensorsWriter w;
  w.add("model.layers.0.weight", ck::DType::f32, {2, 3}, bytes_of(f32));
  w.add("f64", ck::DType::f64, {3}, bytes_of(f64));
  w.add("f16", ck::DType::f16, {3, 1}, bytes_of(f16));
  w.add("scalar", ck::DType::bf16, {}, bytes_of(bf16));
  w.add("bf16", ck::DType::bf16, {1, 2}, bytes_of(bf16_row));
  w.add("i64", ck::DType::i64, {2}, bytes_of(i64));
  w.add("u64", ck::DType::u64, {1}, bytes_of(u64));
  w.add("i32", ck::DType::i32, {2}, bytes_of(i32));
  w.add("u32", ck::DType::u32, {1}, bytes_of(u32));
  w.add("i16", ck::DType::i16, {2}, bytes_of(i16));
  w.add("u16", ck::DType::u16, {2}, bytes_of(u16));
  w.add("i8", ck::DType::i8, {3}, bytes_of(i8));
  w.add("u8", ck::DType::u8, {2}, bytes_of(u8));
  w.add("mask", ck::DType::boolean, {2, 2}, bytes_of(boolean));
  w.add("e4m3", ck::DType::f8_e4m3, {2}, bytes_of(e4m3));
  w.add("e5m2", ck::DType::f8_e5m2, {2}, bytes_of(e5m2));
  w.add("empty", ck::DType::f32, {0, 4}, bytes_of(none));
  w.set_metadata("format", "pt");

  const std::map<std::string, Expected> expected{
      {"model.layers.0.weight", {"F32", {2, 3}, 21.5}},
      {"f64", {"F64", {3}, 0.125 - 1e10 + 3}},
      {"f16", {"F16", {3, 1}, -0.5}},
      {"scalar", {"BF16", {}, 1.0}},
      {"bf16", {"BF16", {1, 2}, 2.5}},
      {"i64", {"I64", {2}, (std::int64_t{1} << 53) - 4}},
      {"u64", {"U64", {1}, std::numeric_limits<std::uint64_t>::max()}},
      {"i32", {"I32", {2}, 99993}},
      {"u32", {"U32", {1}, 4000000000}},
      {"i16", {"I16", {2}, -297}},
      {"u16", {"U16", {2}, 65536}},
      {"i8", {"I8", {3}, -2}},
      {"u8", {"U8", {2}, 300}},
      {"mask", {"BOOL", {2, 2}, 3}},
      {"e4m3", {"F8_E4M3", {2}, 2.5}},
      {"e5m2", {"F8_E5M2", {2}, 1.5}},
      {"empty", {"F32", {0, 4}, 0.0}},
  };

  plexus::test::TempDir dir;
  const fs::path file = dir.path() / "all dtypes.safetensors";  // a space, to test the quoting
  w.write(file);
  const auto result = run_script(file);
  BOOST_TEST_INFO("python output: " << result.output);
  BOOST_TEST_REQUIRE(result.status == 0);
  const boost::json::value report = boost::json::parse(result.output);
  BOOST_TEST(report.as_object().size() == expected.size());
  const bool with_torch = python_can_import("torch");
  BOOST_TEST_MESSAGE("torch cross-check: " << (with_torch ? "on" : "off (torch not installed)"));

  for (const auto& [name, want] : expected) {
    BOOST_TEST_CONTEXT("tensor " << name) {
      const auto* got = report.as_object().if_contains(name);
      BOOST_TEST_REQUIRE(got != nullptr);
      BOOST_TEST(got->at("dtype").as_string() == want.dtype);
      std::vector<std::int64_t> shape;
      for (const auto& d : got->at("shape").as_array()) shape.push_back(d.as_int64());
      BOOST_TEST(shape == want.shape, tt::per_element());
      const auto& sum = got->at("sum");
      if (want.sum.is_double()) {
        BOOST_TEST_REQUIRE(sum.is_number());
        BOOST_TEST(sum.to_number<double>() == want.sum.as_double(), tt::tolerance(1e-12));
      } else {
        // Integer sums are exact on both sides: compare as JSON values.
        BOOST_TEST(boost::json::serialize(sum) == boost::json::serialize(want.sum));
      }
      // Every torch has these; U16/U32/U64 and the 8-bit floats came later (torch 2.1, 2.3), and
      // the script leaves them out where torch lacks them.
      const std::set<std::string> in_every_torch{"BOOL", "U8", "I8", "I16", "I32", "I64", "F16", "BF16", "F32", "F64"};
      if (with_torch && in_every_torch.contains(want.dtype)) BOOST_TEST(got->as_object().contains("torch_sum"));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_python_reader_refuses_what_the_format_forbids) {
  // So that a passing comparison above means something: the reference reader is itself strict.
  plexus::test::TempDir dir;
  const std::vector<float> v{1, 2};
  ck::SafetensorsWriter w;
  w.add("v", ck::DType::f32, {2}, bytes_of(v));
  const auto good = w.to_bytes();
  const auto run_on = [&](const std::vector<std::byte>& bytes) {
    const fs::path file = dir.path() / "file.safetensors";
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return run_script(file);
  };
  const auto check = [&](const std::vector<std::byte>& bytes, const std::string& part) {
    const auto result = run_on(bytes);
    BOOST_TEST_INFO("python output: " << result.output);
    BOOST_TEST(result.status == 1);
    BOOST_TEST(result.output.find(part) != std::string::npos);
  };
  BOOST_TEST(run_on(good).status == 0);
  auto extra = good;
  extra.push_back(std::byte{0});  // a byte no tensor owns
  check(extra, "data buffer has 9 bytes, tensors cover 8");
  check(std::vector<std::byte>(good.begin(), good.end() - 1), "does not fit data_offsets");
  check(std::vector<std::byte>(good.begin(), good.begin() + 5), "shorter than 8 bytes");
}

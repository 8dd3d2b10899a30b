// `plexus bench`, run as a user runs it: the real binary, the real mhc_fused and mhc_native
// plugins, small sizes (T = 37, n = 4, C = 24: each run takes well under a second). Timings
// themselves are not asserted beyond being positive and ordered (this machine is shared); what
// is asserted is what a reader relies on: the rows, the JSON fields, the byte counts of the
// documented formulas, the check against the reference and the errors.
#define BOOST_TEST_MODULE bench_cli
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_process.hpp"
#include "temp_dir.hpp"

using plexus::test::quote;
using plexus::test::run_process;

namespace {

const std::string kPlexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus";
constexpr int64_t T = 37, n = 4, C = 24, W = n * n + 2 * n;
const std::string kSmall =
    " --tokens 37 --streams 4 --hidden 24 --sinkhorn-iterations 20 --warmup 1 --repeats 3";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

boost::json::object read_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return boost::json::parse(text.str()).as_object();
}

// The table's lines: from the header (starting "backend") to the first empty line.
std::vector<std::string> table_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output.substr(output.find("\nbackend ") + 1));
  for (std::string line; std::getline(in, line) && !line.empty();) lines.push_back(line);
  return lines;
}

struct Bench {
  plexus::test::ProcessResult result;
  boost::json::object json;
};

Bench bench(const std::string& args) {
  plexus::test::TempDir dir;
  const auto file = dir.path() / "bench.json";
  Bench b{run_process(kPlexus + " bench" + args + " --json " + quote(file.string())), {}};
  if (b.result.status == 0 || b.result.status == 2) b.json = read_json(file);
  return b;
}

double number(const boost::json::value& v) {
  return v.is_double() ? v.as_double() : static_cast<double>(v.as_int64());
}

}  // namespace

// Every primitive, `all` and `sublayer`, mhc_fused checked against mhc_native (the default
// check): exit 0, a table row and a JSON row per direction, positive GB/s, and the check within
// the float32 default tolerance 1e-4 (the two backends agree to ~1e-6 here; mhc_fused's README).
BOOST_AUTO_TEST_CASE(every_primitive_times_and_checks_mhc_fused_against_mhc_native) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {"proj_rms", {"proj_rms"}},
      {"mappings", {"mappings"}},
      {"aggregate", {"aggregate"}},
      {"post_res", {"post_res"}},
      {"all", {"proj_rms", "mappings", "aggregate", "post_res"}},
      {"sublayer", {"sublayer"}}};
  for (const auto& [primitive, rows] : cases) {
    BOOST_TEST_CONTEXT("--primitive " << primitive) {
      const Bench b = bench(" --backend mhc_fused --primitive " + primitive + kSmall);
      BOOST_TEST_REQUIRE(b.result.status == 0, b.result.output);
      BOOST_TEST(contains(b.result.output, "copy bandwidth"), b.result.output);
      BOOST_TEST(contains(b.result.output, "check passed (worst mhc_fused "), b.result.output);
      const auto lines = table_lines(b.result.output);
      BOOST_TEST_REQUIRE(lines.size() == 1 + 2 * rows.size(), b.result.output);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        BOOST_TEST(contains(lines[1 + 2 * i], "mhc_fused  " + rows[i]), lines[1 + 2 * i]);
        BOOST_TEST(contains(lines[1 + 2 * i], "forward"), lines[1 + 2 * i]);
        BOOST_TEST(contains(lines[2 + 2 * i], "backward"), lines[2 + 2 * i]);
      }
      // Aligned columns: every row's "of copy" value ends under the header's.
      const std::size_t percent = lines[0].find("of copy") + std::string("of copy").size() - 1;
      for (std::size_t i = 1; i < lines.size(); ++i) BOOST_TEST(lines[i].at(percent) == '%', lines[i]);

      const auto& json = b.json;
      BOOST_TEST(contains(std::string(json.at("command").as_string()), "plexus bench --backend mhc_fused"));
      BOOST_TEST(json.at("sizes").at("tokens").as_int64() == T);
      BOOST_TEST(json.at("sizes").at("dtype").as_string() == "float32");
      BOOST_TEST(json.at("machine").at("threads").as_int64() >= 1);
      BOOST_TEST(number(json.at("machine").at("copy_bandwidth_gb_per_s")) > 0.0);
      BOOST_TEST(json.at("check").at("passed").as_bool());
      const auto& json_rows = json.at("rows").as_array();
      BOOST_TEST_REQUIRE(json_rows.size() == 2 * rows.size());
      for (const auto& value : json_rows) {
        const auto& row = value.as_object();
        BOOST_TEST(row.at("backend").as_string() == "mhc_fused");
        BOOST_TEST(number(row.at("gb_per_s")) > 0.0);
        BOOST_TEST(number(row.at("bytes")) > 0.0);
        BOOST_TEST(number(row.at("min_ms")) <= number(row.at("median_ms")));
        BOOST_TEST(number(row.at("median_ms")) <= number(row.at("max_ms")));
        BOOST_TEST(row.at("samples_ms").as_array().size() == 3u);
        const auto& check = row.at("check").as_object();
        BOOST_TEST(check.at("against").as_string() == "mhc_native");
        BOOST_TEST(number(check.at("max_rel_diff")) <= 1e-4);
        BOOST_TEST(!check.at("tensors").as_object().empty());
      }
    }
  }
}

// The bytes per call are the formulas of `plexus bench --help` and docs/performance.md, and the
// FLOPs of proj_rms its GEMM's; the check covers every output and gradient of the direction.
BOOST_AUTO_TEST_CASE(bytes_flops_and_checked_tensors_follow_the_documented_formulas) {
  const Bench b = bench(" --backend mhc_fused --primitive all" + kSmall);
  BOOST_TEST_REQUIRE(b.result.status == 0, b.result.output);
  const double s = 4, m = 4, nC = n * C;  // float32 activations and mappings
  const std::vector<std::pair<double, double>> expected{
      {T * (nC * s + (W + 1) * m) + nC * W * m, T * (3 * nC * s + (W + 1) * m) + 3 * nC * W * m},
      {T * (2 * W + 1) * m + (W + 3) * m, T * (3 * W + 2) * m + 3 * (W + 3) * m},
      {T * ((n + 1) * C * s + n * m), T * ((3 * n + 1) * C * s + 2 * n * m)},
      {T * ((2 * n + 1) * C * s + (n * n + n) * m) + C * s,
       T * ((4 * n + 2) * C * s + 2 * (n * n + n) * m) + 3 * C * s}};
  const auto& rows = b.json.at("rows").as_array();
  BOOST_TEST_REQUIRE(rows.size() == 8u);
  for (std::size_t i = 0; i < 4; ++i) {
    BOOST_TEST(number(rows[2 * i].at("bytes")) == expected[i].first, "row " << 2 * i);
    BOOST_TEST(number(rows[2 * i + 1].at("bytes")) == expected[i].second, "row " << 2 * i + 1);
  }
  BOOST_TEST(number(rows[0].at("flops")) == 2.0 * T * nC * W);
  BOOST_TEST(number(rows[1].at("flops")) == 4.0 * T * nC * W);
  BOOST_TEST(!rows[0].at("flops_estimated").as_bool());
  BOOST_TEST(rows[2].at("flops_estimated").as_bool());  // mappings: a rough count
  BOOST_TEST(rows[4].at("flops").is_null());            // aggregate: not counted
  BOOST_TEST(contains(b.result.output, "  mhc_fused post_res backward: dx "),
             b.result.output);  // every tensor
  const auto& post_res_backward = rows[7].at("check").at("tensors").as_object();
  for (const char* name : {"dx", "dh_res", "dh_post", "df", "dbias"})
    BOOST_TEST(post_res_backward.contains(name), name);
}

// Several backends side by side: a row for each, the reference marked, the sum of medians.
BOOST_AUTO_TEST_CASE(two_backends_are_compared_side_by_side) {
  const Bench b = bench(" --backend mhc_fused --backend mhc_native --primitive all --direction fwd" + kSmall);
  BOOST_TEST_REQUIRE(b.result.status == 0, b.result.output);
  const auto lines = table_lines(b.result.output);
  BOOST_TEST_REQUIRE(lines.size() == 9u, b.result.output);
  BOOST_TEST(contains(lines[2], "mhc_native  proj_rms   forward"), lines[2]);
  BOOST_TEST(contains(lines[2], "reference"), lines[2]);
  BOOST_TEST(contains(b.result.output, "sum of medians: mhc_fused"), b.result.output);
  const auto& rows = b.json.at("rows").as_array();
  BOOST_TEST(rows.size() == 8u);
  BOOST_TEST(rows[1].at("reference").as_bool());
  BOOST_TEST(rows[1].at("check").is_null());
}

// A tolerance no float32 backend meets: exit status 2, the worst tensor named, the JSON still
// written with the failure.
BOOST_AUTO_TEST_CASE(a_check_beyond_the_tolerance_fails_naming_the_worst_tensor) {
  const Bench b = bench(" --backend mhc_fused --primitive post_res --tolerance 1e-12" + kSmall);
  BOOST_TEST(b.result.status == 2, b.result.output);
  BOOST_TEST(contains(b.result.output,
                      "plexus bench: error: mhc_fused differs from mhc_native beyond the tolerance"),
             b.result.output);
  BOOST_TEST(contains(b.result.output, "mhc_fused post_res "), b.result.output);
  BOOST_TEST(!b.json.at("check").at("passed").as_bool());
}

BOOST_AUTO_TEST_CASE(bad_input_is_refused_clearly) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"--backend mhc_fusd", "unknown backend 'mhc_fusd' (did you mean 'mhc_fused'?)"},
      {"--backend mhc_fused --check mhc_natve", "unknown backend 'mhc_natve' (did you mean 'mhc_native'?)"},
      {"--backend mhc_fused --primitive post_rs", "unknown primitive 'post_rs' (did you mean 'post_res'?)"},
      {"--backend mhc_fused --tokens 0", "--tokens must be a positive integer, not 0"},
      {"--backend mhc_fused --hidden=-4", "--hidden must be a positive integer, not -4"},
      {"--backend mhc_fused --streams 0", "--streams must be a positive integer"},
      {"--backend mhc_fused --sinkhorn-iterations 0", "--sinkhorn-iterations must be a positive integer"},
      {"--backend mhc_fused --repeats 0", "--repeats must be a positive integer"},
      {"--backend mhc_fused --dtype f16", "--dtype f16: expected f32, f64 or bf16"},
      {"--primitive all", "the option --backend is required"},
      // bf16 is the backend's to refuse (neither CPU backend has it): its message comes through.
      {"--backend mhc_fused --dtype bf16 --tokens 4 --repeats 1",
       "mhc_fused supports float32 and float64 activations, not bfloat16"},
  };
  for (const auto& [args, message] : cases) {
    BOOST_TEST_CONTEXT(args) {
      const auto result = run_process(kPlexus + " bench " + args);
      BOOST_TEST(result.status == 1, result.output);
      BOOST_TEST(contains(result.output, "plexus bench: error: "), result.output);
      BOOST_TEST(contains(result.output, message), result.output);
    }
  }
}

// Without a GPU (or without CUDA in the build) --device cuda is refused before anything runs;
// on a machine with one, mhc_fused (CPU only) refuses it. Either way: exit 1, a sentence.
BOOST_AUTO_TEST_CASE(device_cuda_without_a_gpu_is_a_clear_error) {
  const auto result = run_process(kPlexus + " bench --backend mhc_fused --device cuda" + kSmall);
  BOOST_TEST(result.status == 1, result.output);
  const bool clear =
      contains(result.output, "plexus bench: error: device cuda:0: no CUDA GPU is visible") ||
      contains(result.output, "plexus bench: error: device cuda:0: this build has no CUDA support") ||
      contains(result.output, "does not run on cuda:0");
  BOOST_TEST(clear, result.output);
}

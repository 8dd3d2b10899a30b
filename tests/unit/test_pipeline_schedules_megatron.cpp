// The pipeline schedules' tables and counts against megatron-core's own functions
// (megatron.core.pipeline_parallel.schedules: get_schedule_table, get_pp_rank_microbatches) for a
// grid of shapes, run by megatron_schedules.py in a Python environment that imports megatron.core:
// the benchmarks' venv (scripts/bench-env.sh: <repo>/.venv-bench, or PLEXUS_BENCH_VENV) or the
// tests' (scripts/python-env.sh: <repo>/.venv, or PLEXUS_VENV), with megatron-core installed in it.
// Neither script installs megatron-core; without such an environment the test reports itself
// skipped.
#define BOOST_TEST_MODULE unit_pipeline_schedules_megatron
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_process.hpp"
#include "schedule_plan.hpp"
#include "skip_module.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
namespace ps = plexus::pipeline_schedules;
using plexus::test::quote;
using plexus::test::run_process;

namespace {

const std::string kScript = std::string(PLEXUS_SOURCE_DIR) + "/tests/unit/megatron_schedules.py";

// The first candidate venv whose Python imports megatron-core's schedules; empty if none does.
std::string megatron_python() {
  std::vector<fs::path> venvs;
  for (const char* var : {"PLEXUS_BENCH_VENV", "PLEXUS_VENV"})
    if (const char* set = std::getenv(var); set != nullptr && *set != '\0') venvs.emplace_back(set);
  venvs.push_back(fs::path(PLEXUS_SOURCE_DIR) / ".venv-bench");
  venvs.push_back(fs::path(PLEXUS_SOURCE_DIR) / ".venv");
  for (const fs::path& venv : venvs) {
    const fs::path python = venv / "bin" / "python";
    if (!fs::exists(python)) continue;
    const auto probe = run_process(quote(python.string()) +
                                   " -c 'from megatron.core.pipeline_parallel.schedules import "
                                   "get_schedule_table, get_pp_rank_microbatches'");
    if (probe.status == 0) return python.string();
  }
  return {};
}

const std::string& python() {
  static const std::string found = megatron_python();
  return found;
}

struct ShapeCase {
  uint32_t P, r, M, V, N;
  bool overlap;
};

std::vector<ShapeCase> grid() {
  std::vector<ShapeCase> cases;
  // Non-interleaved (V = 1: no virtual pipeline), with and without pipelining.
  for (uint32_t P = 1; P <= 5; ++P)
    for (uint32_t r = 0; r < P; ++r)
      for (uint32_t M = 1; M <= 9; ++M) cases.push_back({P, r, M, 1, P, false});
  // Interleaved, the shapes Megatron accepts, with and without the EP overlap.
  for (uint32_t P = 2; P <= 4; ++P)
    for (uint32_t V = 2; V <= 3; ++V)
      for (uint32_t M = P; M <= 2 * P + 3; ++M)
        for (uint32_t N = P; N <= M; ++N) {
          if (M % N != 0 && M % N < P) continue;
          for (uint32_t r = 0; r < P; ++r)
            for (const bool overlap : {false, true}) cases.push_back({P, r, M, V, N, overlap});
        }
  return cases;
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(!python().empty(),
                          "no Python environment with megatron-core (<repo>/.venv-bench or <repo>/.venv, or "
                          "PLEXUS_BENCH_VENV / PLEXUS_VENV)")

BOOST_AUTO_TEST_CASE(tables_and_counts_match_megatron_core) {
  const std::vector<ShapeCase> cases = grid();
  boost::json::array shapes;
  for (const ShapeCase& c : cases)
    shapes.push_back(boost::json::object{
        {"P", c.P}, {"r", c.r}, {"M", c.M}, {"V", c.V}, {"N", c.N}, {"overlap", c.overlap}});
  plexus::test::TempDir dir;
  const fs::path in = dir.write("shapes.json", boost::json::serialize(shapes));
  const fs::path out = dir.path() / "megatron.json";
  const auto ran = run_process(quote(python()) + " " + quote(kScript) + " " + quote(in.string()) + " " +
                               quote(out.string()));
  BOOST_TEST_REQUIRE(ran.status == 0, ran.output);
  std::ifstream file(out);
  std::stringstream text;
  text << file.rdbuf();
  const boost::json::object answer = boost::json::parse(text.str()).as_object();
  BOOST_TEST_MESSAGE("megatron-core " << answer.at("megatron_core"));
  const boost::json::array& results = answer.at("results").as_array();
  BOOST_TEST_REQUIRE(results.size() == cases.size());

  std::size_t compared = 0, tables = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const ShapeCase& c = cases[i];
    const boost::json::object& m = results[i].as_object();
    BOOST_TEST_CONTEXT("P " << c.P << ", r " << c.r << ", M " << c.M << ", V " << c.V << ", N " << c.N
                            << ", overlap " << c.overlap) {
      if (!m.at("counts").is_null()) {
        const boost::json::object& mc = m.at("counts").as_object();
        const ps::Counts mine = c.V == 1 ? ps::one_f_one_b_counts(c.P, c.r, c.M)
                                         : ps::interleaved_counts(c.P, c.r, c.M, c.V, c.N, c.overlap);
        // Without pipelining Megatron counts no warmup, as min(P - r - 1, M) = 0 does.
        BOOST_TEST(mine.total == mc.at("total").to_number<uint32_t>());
        BOOST_TEST(mine.warmup == mc.at("warmup").to_number<uint32_t>());
        BOOST_TEST(mine.steady == mc.at("remaining").to_number<uint32_t>());
        BOOST_TEST(mine.all_in_warmup == mc.at("all_in_warmup").as_bool());
        ++compared;
      }
      if (const auto* table = m.if_contains("table")) {
        std::vector<ps::VirtualMicrobatch> theirs;
        for (const boost::json::value& e : table->as_array())
          theirs.push_back(
              {e.as_array().at(0).to_number<uint32_t>(), e.as_array().at(1).to_number<uint32_t>()});
        const std::vector<ps::VirtualMicrobatch> mine = ps::schedule_table(c.M, c.V, c.N);
        BOOST_TEST((mine == theirs));
        ++tables;
      }
    }
  }
  BOOST_TEST_MESSAGE("compared " << compared << " counts and " << tables << " tables with megatron-core");
}

// `plexus topology`: the groups of a job before it is queued. Megatron-LM's documented example
// (16 GPUs, tp 2, pp 4: tp groups [g0, g1] ..., pp groups [g0, g4, g8, g12] ..., dp groups
// [g0, g2] ...) through the real tool, and its refusals.
#define BOOST_TEST_MODULE topology_cli
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "run_process.hpp"

using plexus::test::run_process;

namespace {

const std::string kPlexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus";

std::vector<std::vector<int>> groups(const boost::json::value& report, const char* kind) {
  return boost::json::value_to<std::vector<std::vector<int>>>(report.at(kind));
}

}  // namespace

BOOST_AUTO_TEST_CASE(megatrons_documented_layout) {
  const auto result = run_process(
      kPlexus + " topology 16 --json --set 'distributed.topology.options={\"tp\": 2, \"pp\": 4}'");
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const boost::json::value report = boost::json::parse(result.output);
  BOOST_TEST(
      (groups(report, "tp") ==
       std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  BOOST_TEST((groups(report, "pp") ==
              std::vector<std::vector<int>>{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  BOOST_TEST(
      (groups(report, "dp") ==
       std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  const auto text =
      run_process(kPlexus + " topology 16 --set 'distributed.topology.options={\"tp\": 2, \"pp\": 4}'");
  BOOST_TEST(text.status == 0);
  BOOST_TEST(text.output.find("pp        4 group(s) of 4: [0, 4, 8, 12] [1, 5, 9, 13]") != std::string::npos,
             text.output);
}

BOOST_AUTO_TEST_CASE(refusals_name_the_sizes) {
  const auto odd = run_process(kPlexus + " topology 6 --set 'distributed.topology.options={\"tp\": 4}'");
  BOOST_TEST(odd.status == 1);
  BOOST_TEST(
      odd.output.find("world size 6 is not divisible by tp (4) x cp (1) x pp (1) = 4") != std::string::npos,
      odd.output);
  const auto zero = run_process(kPlexus + " topology 0");
  BOOST_TEST(zero.status == 1);
  BOOST_TEST(zero.output.find("WORLD_SIZE must be a number of ranks") != std::string::npos, zero.output);
  const auto unknown = run_process(kPlexus + " topology 4 --set distributed.topology.component=ring");
  BOOST_TEST(unknown.status == 1);
  BOOST_TEST(unknown.output.find("distributed.topology.component") != std::string::npos, unknown.output);
}

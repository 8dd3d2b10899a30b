// The "mimo" topology across 8 real processes under mpirun: Megatron-LM's heterogeneous layout
// (an "images" encoder of 4 ranks with tp 2 at offset 0; "language" of 4 ranks with tp 2 and pp 2
// at offset 4) becomes communicators holding exactly Megatron's ranks on the ranks of each module
// and none on the others, and plugins reach them as "<module>/<kind>" through the host table.
// A colocated layout on 4 ranks gives every rank both modules' groups, each of its own size.
#define BOOST_TEST_MODULE topology_mimo_ranks
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "comm_harness.hpp"
#include "per_process.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/run_config.hpp"
#include "skip_module.hpp"

namespace utf = boost::unit_test;
using namespace plexus::test;
using plexus::distributed::LaunchEnv;
using plexus::distributed::Runtime;

PLEXUS_SKIP_MODULE_UNLESS(std::filesystem::exists(plugin_file("comm_mpi")) &&
                              std::filesystem::exists(plugin_file("topology_mimo")) &&
                              (under_mpirun() || have_mpirun()),
                          "needs the comm_mpi and topology_mimo plugins (a build with MPI) and mpirun")

namespace {

utf::assertion_result in_ranks(utf::test_unit_id) {
  return utf::assertion_result(under_mpirun());
}
utf::assertion_result in_launcher(utf::test_unit_id) {
  return utf::assertion_result(!under_mpirun());
}

// The layout by world size: 8 ranks non-colocated (Megatron's test), 4 ranks colocated.
std::string modules_for(int world) {
  if (world == 8)
    return R"([{"name": "images", "num_ranks": 4, "tp": 2},
               {"name": "language", "num_ranks": 4, "tp": 2, "pp": 2, "rank_offset": 4}])";
  return R"([{"name": "images", "num_ranks": 4}, {"name": "language", "num_ranks": 4, "tp": 2}])";
}

struct Started {
  plexus::PluginHost host;
  std::unique_ptr<Runtime> runtime;
  Started() {
    const LaunchEnv env = LaunchEnv::from_process();
    const auto config = plexus::load_run_config(
        std::nullopt, {"distributed.topology={\"component\": \"mimo\", \"options\": {\"modules\": " +
                           modules_for(env.world_size) + "}}",
                       "distributed.timeout_s=30"});
    runtime =
        Runtime::start(host, config, {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false}, env);
  }
};

Started& started() {
  return plexus::test::per_process<Started>();
}
using StopAtTheEnd = plexus::test::DestroyAtTheEnd<Started>;
BOOST_TEST_GLOBAL_FIXTURE(StopAtTheEnd);

// The sum over this rank's group of `kind` of each member's world rank, through the host table,
// or -1 when this rank is in no group of that kind.
double group_sum(const plx_host_api* api, const char* kind, int world_rank) {
  plx_group group = nullptr;
  if (api->group_get(api->ctx, kind, &group) != PLX_OK || group == nullptr) return -1;
  double value = world_rank;
  int64_t shape[1] = {1};
  DLTensor t{&value, {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, shape, nullptr, 0};
  BOOST_TEST_REQUIRE(api->all_reduce(api->ctx, group, &t, &t, PLX_REDUCE_SUM, nullptr, nullptr) == PLX_OK);
  return value;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(launcher, *utf::precondition(in_launcher))

BOOST_AUTO_TEST_CASE(non_colocated_on_8_ranks) {
  const Job job = mpirun(8, "--run_test=ranks/non_colocated");
  BOOST_TEST_INFO("mpirun -np 8 (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status == 0);
  BOOST_TEST(count_of(job.output, "*** No errors detected") == 8u);
}

BOOST_AUTO_TEST_CASE(colocated_on_4_ranks) {
  const Job job = mpirun(4, "--run_test=ranks/colocated");
  BOOST_TEST_INFO("mpirun -np 4 (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status == 0);
  BOOST_TEST(count_of(job.output, "*** No errors detected") == 4u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ranks, *utf::precondition(in_ranks))

BOOST_AUTO_TEST_CASE(non_colocated) {
  Started& s = started();
  const Runtime& rt = *s.runtime;
  const int r = rt.rank();
  BOOST_TEST_REQUIRE(rt.world_size() == 8);
  const bool encoder = r < 4;
  // Each rank holds its own module's groups and none of the other's.
  BOOST_TEST((rt.group("images/tp") != nullptr) == encoder);
  BOOST_TEST((rt.group("language/tp") != nullptr) == !encoder);
  // No whole-world grid: the trainer's plain kinds are not there.
  BOOST_TEST(rt.group("tp") == nullptr);
  const plx_host_api* api = s.host.services().table_for("a_plugin");
  if (encoder) {
    BOOST_TEST(rt.group("images/tp")->rank() == r % 2);
    BOOST_TEST(rt.group("images/dp")->rank() == r / 2);
    BOOST_TEST(group_sum(api, "images/tp", r) == (r - r % 2) * 2 + 1);  // {0,1} or {2,3}
    BOOST_TEST(group_sum(api, "images/dp", r) == (r % 2) * 2 + 2);      // {0,2} or {1,3}
    BOOST_TEST(group_sum(api, "images/pp", r) == r);
    BOOST_TEST(group_sum(api, "language/embd", r) == -1);
  } else {
    BOOST_TEST(group_sum(api, "language/tp", r) == (r - r % 2) * 2 + 1);  // {4,5} or {6,7}
    BOOST_TEST(group_sum(api, "language/pp", r) == (r % 2) * 2 + 10);     // {4,6} or {5,7}
    BOOST_TEST(rt.group("language/pp")->rank() == (r - 4) / 2);
    BOOST_TEST(group_sum(api, "language/dp", r) == r);
    BOOST_TEST(group_sum(api, "language/embd", r) == (r % 2) * 2 + 10);  // first and last stage
    // pos_embd: the first stage (4, 5) alone; the last stage is in none.
    BOOST_TEST(group_sum(api, "language/pos_embd", r) == (r < 6 ? r : -1));
  }
  BOOST_TEST(group_sum(api, "world", r) == 28);
}

BOOST_AUTO_TEST_CASE(colocated) {
  Started& s = started();
  const Runtime& rt = *s.runtime;
  const int r = rt.rank();
  BOOST_TEST_REQUIRE(rt.world_size() == 4);
  const plx_host_api* api = s.host.services().table_for("a_plugin");
  // images: tp 1, dp 4; language: tp 2, dp 2, on the same ranks.
  BOOST_TEST(rt.group("images/dp")->size() == 4);
  BOOST_TEST(rt.group("language/dp")->size() == 2);
  BOOST_TEST(group_sum(api, "images/dp", r) == 6);
  BOOST_TEST(group_sum(api, "images/tp", r) == r);
  BOOST_TEST(group_sum(api, "language/tp", r) == (r - r % 2) * 2 + 1);
  BOOST_TEST(group_sum(api, "language/dp", r) == (r % 2) * 2 + 2);
}

BOOST_AUTO_TEST_SUITE_END()

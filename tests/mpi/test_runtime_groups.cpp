// The distributed runtime across real processes: on 4 ranks with tp = 2 the grid's groups become
// communicators holding exactly Megatron's ranks (tp pairs {0,1}, {2,3}; dp pairs {0,2}, {1,3}),
// plugins reach them through the host table with blocking and started calls, and the start-up
// agreement check names the rank whose payload differs, identically on every rank.
#define BOOST_TEST_MODULE runtime_groups
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "comm_harness.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/run_config.hpp"
#include "skip_module.hpp"
#include "per_process.hpp"

namespace utf = boost::unit_test;
using namespace plexus::test;
using plexus::distributed::LaunchEnv;
using plexus::distributed::Runtime;

PLEXUS_SKIP_MODULE_UNLESS(std::filesystem::exists(plugin_file("comm_mpi")) &&
                              (under_mpirun() || have_mpirun()),
                          "needs the comm_mpi plugin (a build with MPI) and mpirun")

namespace {

utf::assertion_result in_ranks(utf::test_unit_id) {
  return utf::assertion_result(under_mpirun());
}
utf::assertion_result in_launcher(utf::test_unit_id) {
  return utf::assertion_result(!under_mpirun());
}

struct Started {
  plexus::PluginHost host;
  std::unique_ptr<Runtime> runtime;
  Started() {
    const auto config = plexus::load_run_config(
        std::nullopt, {"distributed.topology.options={\"tp\": 2}", "distributed.timeout_s=30"});
    runtime = Runtime::start(host, config, {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false},
                             LaunchEnv::from_process());
  }
};

// MPI starts once per process: one runtime for every test case, stopped after the last.
Started& started() {
  return plexus::test::per_process<Started>();
}
using StopAtTheEnd = plexus::test::DestroyAtTheEnd<Started>;
BOOST_TEST_GLOBAL_FIXTURE(StopAtTheEnd);

// The sum over a group of each member's world rank, through the host table.
double group_sum(const plx_host_api* api, const char* kind, int world_rank, bool started) {
  plx_group group = nullptr;
  BOOST_TEST_REQUIRE(api->group_get(api->ctx, kind, &group) == PLX_OK);
  double value = world_rank;
  int64_t shape[1] = {1};
  DLTensor t{&value, {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, shape, nullptr, 0};
  plx_request request = nullptr;
  BOOST_TEST_REQUIRE(api->all_reduce(api->ctx, group, &t, &t, PLX_REDUCE_SUM, nullptr,
                                     started ? &request : nullptr) == PLX_OK);
  if (started) BOOST_TEST_REQUIRE(api->request_wait(api->ctx, request) == PLX_OK);
  return value;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(launcher, *utf::precondition(in_launcher))

BOOST_AUTO_TEST_CASE(every_check_passes_on_4_ranks) {
  const Job job = mpirun(4, "--run_test=ranks");
  BOOST_TEST_INFO("mpirun -np 4 (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status == 0);
  BOOST_TEST(count_of(job.output, "*** No errors detected") == 4u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ranks, *utf::precondition(in_ranks))

BOOST_AUTO_TEST_CASE(groups_hold_megatrons_ranks_and_plugins_reach_them) {
  Started& s = started();
  const Runtime& rt = *s.runtime;
  const int r = rt.rank();
  BOOST_TEST_REQUIRE(rt.world_size() == 4);
  BOOST_TEST_REQUIRE(rt.group("tp") != nullptr);
  BOOST_TEST(rt.group("tp")->size() == 2);
  BOOST_TEST(rt.group("tp")->rank() == r % 2);  // tp varies fastest
  BOOST_TEST(rt.data_parallel().size() == 2);
  BOOST_TEST(rt.data_parallel().rank() == r / 2);
  BOOST_TEST(rt.group("pp")->size() == 1);

  const plx_host_api* api = s.host.services().table_for("a_plugin");
  const int tp_first = r - r % 2;
  BOOST_TEST(group_sum(api, "tp", r, false) == tp_first + tp_first + 1);
  BOOST_TEST(group_sum(api, "dp", r, true) == (r % 2) + (r % 2 + 2));
  BOOST_TEST(group_sum(api, "world", r, true) == 0 + 1 + 2 + 3);
  plx_group tp = nullptr;
  BOOST_TEST_REQUIRE(api->group_get(api->ctx, "tp", &tp) == PLX_OK);
  int32_t rank = -1, size = -1;
  BOOST_TEST(api->group_rank(api->ctx, tp, &rank, &size) == PLX_OK);
  BOOST_TEST(rank == r % 2);
  BOOST_TEST(size == 2);
}

BOOST_AUTO_TEST_CASE(plugins_create_groups_from_rank_lists) {
  Started& s = started();
  const int r = s.runtime->rank();
  const plx_host_api* api = s.host.services().table_for("a_plugin");
  BOOST_TEST_REQUIRE(PLX_HAS_FIELD(api, plx_host_api, group_create));
  // {0, 3} and {2} (in that group-rank order); rank 1 is in none.
  const int32_t ranks[] = {3, 0, 2};
  const uint32_t sizes[] = {2, 1};
  plx_group mine = nullptr;
  BOOST_TEST_REQUIRE(api->group_create(api->ctx, "outer", ranks, sizes, 2, &mine) == PLX_OK,
                     plexus::HostServices::take_last_error());
  if (r == 1) {
    BOOST_TEST(mine == nullptr);
  } else {
    BOOST_TEST_REQUIRE(mine != nullptr);
    int32_t rank = -1, size = -1;
    BOOST_TEST(api->group_rank(api->ctx, mine, &rank, &size) == PLX_OK);
    BOOST_TEST(size == (r == 2 ? 1 : 2));
    BOOST_TEST(rank == (r == 0 ? 1 : 0));  // {3, 0}: rank 3 first
    BOOST_TEST(group_sum(api, "outer", r, true) == (r == 2 ? 2 : 3));
  }
  // Taken names and bad lists are refused on every rank, before any communicator is made.
  plx_group none = nullptr;
  BOOST_TEST(api->group_create(api->ctx, "tp", ranks, sizes, 2, &none) == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(plexus::HostServices::take_last_error().find("'tp' is taken") != std::string::npos);
  const int32_t twice[] = {0, 1, 1};
  const uint32_t three[] = {3};
  BOOST_TEST(api->group_create(api->ctx, "bad", twice, three, 1, &none) == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(plexus::HostServices::take_last_error().find("rank 1 is listed twice") != std::string::npos);
  // Ranks asking for different groups are told so, all of them, naming the rank.
  const int32_t pair[] = {0, static_cast<int32_t>(r == 2 ? 3 : 1)};
  const uint32_t two[] = {2};
  BOOST_TEST(api->group_create(api->ctx, "uneven", pair, two, 1, &none) == PLX_ERR_INVALID_ARGUMENT);
  const std::string differ = plexus::HostServices::take_last_error();
  BOOST_TEST(differ.find("different group_create arguments") != std::string::npos, differ);
  BOOST_TEST(differ.find("rank 2") != std::string::npos, differ);
}

BOOST_AUTO_TEST_CASE(the_agreement_check_names_the_rank_that_differs_on_every_rank) {
  Started& s = started();
  const int r = s.runtime->rank();
  s.runtime->check_same(boost::json::parse(R"({"train": {"steps": 5}})"), "run configs");  // all agree
  const boost::json::value mine =
      boost::json::parse(r == 3 ? R"({"train": {"steps": 7}})" : R"({"train": {"steps": 5}})");
  std::string message;
  try {
    s.runtime->check_same(mine, "run configs");
  } catch (const std::exception& e) {
    message = e.what();
  }
  BOOST_TEST(message.find("ranks started with different run configs") != std::string::npos, message);
  BOOST_TEST(message.find("rank 3") != std::string::npos, message);
  BOOST_TEST(message.find("train.steps: 5 vs 7") != std::string::npos, message);
  BOOST_TEST(message.find("rank 1") == std::string::npos, message);
}

BOOST_AUTO_TEST_SUITE_END()

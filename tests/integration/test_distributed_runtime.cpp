// The distributed runtime in one process, as `plexus-train` starts it without a launcher: the
// "local" comm backend and the "grid" topology loaded from the plugin directory on demand, the
// groups it names, plugins reaching them through the host table, and clear errors for a backend
// that does not exist or cannot run this many ranks. (Several ranks: tests/mpi.)
#define BOOST_TEST_MODULE distributed_runtime
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "plexus/core/config.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

using plexus::distributed::LaunchEnv;
using plexus::distributed::Runtime;

namespace {

const plexus::PluginLoadOptions kPlugins{{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false};

boost::json::value config(const std::vector<std::string>& overrides = {}) {
  return plexus::load_run_config(std::nullopt, overrides);
}

std::string start_error(const boost::json::value& run_config, const LaunchEnv& env) {
  plexus::PluginHost host;
  try {
    Runtime::start(host, run_config, kPlugins, env);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

DLTensor floats(std::vector<float>& data, int64_t* shape) {
  shape[0] = static_cast<int64_t>(data.size());
  return DLTensor{data.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_process_runs_on_the_local_backend_with_every_group_of_one_rank) {
  plexus::PluginHost host;
  const auto runtime = Runtime::start(host, config(), kPlugins, LaunchEnv{});
  BOOST_TEST(runtime->settings().comm == "local");
  BOOST_TEST(runtime->world_size() == 1);
  BOOST_TEST(runtime->rank() == 0);
  BOOST_TEST(runtime->data_parallel().size() == 1);
  const std::vector<std::string> kinds = runtime->group_kinds();
  for (const char* kind : {"tp", "cp", "dp", "pp", "ep"}) {
    BOOST_TEST((std::find(kinds.begin(), kinds.end(), kind) != kinds.end()), kind);
    BOOST_TEST_REQUIRE(runtime->group(kind) != nullptr);
    BOOST_TEST(runtime->group(kind)->size() == 1);
  }
  // The same payload on every rank (one here) passes the start-up agreement check.
  runtime->check_same(config(), "run configs");
}

BOOST_AUTO_TEST_CASE(plugins_reach_the_groups_through_the_host_table) {
  plexus::PluginHost host;
  const plx_host_api* api = host.services().table_for("a_plugin");
  plx_group group = nullptr;
  BOOST_TEST(api->group_get(api->ctx, "dp", &group) == PLX_ERR_NOT_FOUND);  // nothing runs yet
  BOOST_TEST(plexus::HostServices::take_last_error().find("not running") != std::string::npos);
  {
    const auto runtime = Runtime::start(host, config(), kPlugins, LaunchEnv{});
    BOOST_TEST_REQUIRE(api->group_get(api->ctx, "dp", &group) == PLX_OK);
    int32_t rank = -1, size = -1;
    BOOST_TEST(api->group_rank(api->ctx, group, &rank, &size) == PLX_OK);
    BOOST_TEST(rank == 0);
    BOOST_TEST(size == 1);
    std::vector<float> data{1.5f, -2.0f, 3.25f};
    int64_t shape[1];
    DLTensor t = floats(data, shape);
    plx_request request = nullptr;
    BOOST_TEST_REQUIRE(api->all_reduce(api->ctx, group, &t, &t, PLX_REDUCE_SUM, nullptr, &request) == PLX_OK);
    BOOST_TEST_REQUIRE(request != nullptr);
    BOOST_TEST(api->request_wait(api->ctx, request) == PLX_OK);
    BOOST_TEST(data == (std::vector<float>{1.5f, -2.0f, 3.25f}), boost::test_tools::per_element());
    BOOST_TEST(api->barrier(api->ctx, group) == PLX_OK);
    BOOST_TEST(api->group_get(api->ctx, "world", &group) == PLX_OK);
    BOOST_TEST(api->group_get(api->ctx, "moe", &group) == PLX_ERR_NOT_FOUND);
    const std::string missing = plexus::HostServices::take_last_error();
    BOOST_TEST(
        missing.find("group 'moe': the topology made no such group (it has: world, ") != std::string::npos,
        missing);
  }
  BOOST_TEST(api->group_get(api->ctx, "dp", &group) == PLX_ERR_NOT_FOUND);  // stopped with the runtime
}

BOOST_AUTO_TEST_CASE(a_backend_that_does_not_exist_is_named_with_its_key) {
  const std::string error = start_error(config({"distributed.comm=gloo"}), LaunchEnv{});
  BOOST_TEST(error.find("distributed.comm") != std::string::npos, error);
  BOOST_TEST(error.find("gloo") != std::string::npos, error);
}

BOOST_AUTO_TEST_CASE(the_local_backend_refuses_a_job_of_several_ranks) {
  LaunchEnv env;
  env.launcher = "env";
  env.rank = 0;
  env.world_size = 2;
  const std::string error = start_error(config({"distributed.comm=local"}), env);
  BOOST_TEST(error.find("2") != std::string::npos, error);
  BOOST_TEST(error.find("local") != std::string::npos, error);
}

BOOST_AUTO_TEST_CASE(bad_topology_options_are_named) {
  const std::string error = start_error(config({"distributed.topology.options={\"tp\": 0}"}), LaunchEnv{});
  BOOST_TEST(error.find("distributed.topology.options") != std::string::npos, error);
}

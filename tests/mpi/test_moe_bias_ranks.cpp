// The expert bias over data-parallel ranks, in real MPI processes: two ranks (an "ep" group of 2,
// which are also the 2 data-parallel ranks) each route their own microbatch through moe.layer
// (tests/unit/test_moe_bias_support.hpp: a token that is the unit vector of dimension j goes to
// expert j), rank 0 tokens for experts 0 0 0 2 0 and rank 1 for 0 1 1: 5, 2, 1, 0 in all, the
// counts of unit.test_moe_expert_bias's single process. After the step every rank reports those
// global counts and holds the bias that single process holds, rate x (-1, 0, +1, +1), exactly;
// either rank's own counts (4 0 1 0 and 1 2 0 0) would move expert 1 the other way. The ranks'
// biases are also gathered and compared bit for bit. Reported skipped without mpirun or the MPI
// comm backend.
#define BOOST_TEST_MODULE moe_bias_ranks
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../unit/test_moe_bias_support.hpp"
#include "comm_harness.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/run_config.hpp"
#include "skip_module.hpp"

namespace utf = boost::unit_test;
using plexus::distributed::LaunchEnv;
using plexus::distributed::Runtime;
using plexus::test::under_mpirun;

PLEXUS_SKIP_MODULE_UNLESS(std::filesystem::exists(plexus::test::plugin_file("comm_mpi")) &&
                              (under_mpirun() || plexus::test::have_mpirun()),
                          "needs the comm_mpi plugin (a build with MPI) and mpirun")

namespace {

utf::assertion_result in_ranks(utf::test_unit_id) { return utf::assertion_result(under_mpirun()); }
utf::assertion_result in_launcher(utf::test_unit_id) { return utf::assertion_result(!under_mpirun()); }

constexpr double kRate = 0.25;

}  // namespace

BOOST_AUTO_TEST_SUITE(launcher, *utf::precondition(in_launcher))

BOOST_AUTO_TEST_CASE(both_ranks_pass) {
  const plexus::test::Job job = plexus::test::mpirun(2, "--run_test=ranks");
  BOOST_TEST_INFO("mpirun -np 2 (" << job.seconds << " s):\n" << job.output);
  BOOST_TEST(job.status == 0);
  BOOST_TEST(plexus::test::count_of(job.output, "*** No errors detected") == 2u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ranks, *utf::precondition(in_ranks))

BOOST_AUTO_TEST_CASE(the_bias_follows_the_counts_summed_over_dp_and_is_the_same_on_every_rank) {
  plexus::PluginHost host;
  const auto config = plexus::load_run_config(
      std::nullopt, {"distributed.topology.options={\"ep\": 2}", "distributed.timeout_s=60"});
  std::unique_ptr<Runtime> runtime = Runtime::start(
      host, config, {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false}, LaunchEnv::from_process());
  BOOST_TEST_REQUIRE(runtime->world_size() == 2);
  BOOST_TEST_REQUIRE(runtime->data_parallel().size() == 2);
  tt::load_built_plugin(host, "moe");
  std::map<std::string, double> reported;
  host.services().set_metric_sink(
      [&](const std::string&, const std::string& name, double value) { reported[name] = value; });

  const moe_test::Config c = moe_bias_test::config(kRate);
  {
    tt::ComponentLayer layer(host.get(PLX_KIND_LAYER, "moe.layer"), c.options, "model.moe.options", c.model(),
                             c.num_layers, DLDevice{kDLCPU, 0});
    BOOST_TEST_REQUIRE(layer->info().num_stages == 5u);  // expert-parallel: dispatch and combine too
    const DLDataType f32 = plx_dtype_f32();
    std::vector<tt::Tensor> params = moe_bias_test::params(*layer, c, f32);
    const std::vector<int> mine = runtime->rank() == 0 ? std::vector<int>{0, 0, 0, 2, 0} : std::vector<int>{0, 1, 1};
    tt::Run run(*layer, {moe_bias_test::tokens_to(mine, c, f32)}, params, f32);
    run.forward(true);
    moe_bias_test::after_step(*layer, run.params, 0);

    for (int e = 0; e < 4; ++e)
      BOOST_TEST(reported.at("layer0.tokens_per_expert." + std::to_string(e)) == (std::vector<double>{5, 2, 1, 0}[e]));
    const tt::Tensor& bias = run.params[moe_test::param_index(*layer, "mlp.router.expert_bias")];
    BOOST_TEST(bias.values() == (std::vector<double>{-kRate, 0.0, kRate, kRate}), boost::test_tools::per_element());

    // Bit for bit the same on both ranks.
    plexus::test::Tensor<float> own(std::vector<float>(bias.f32.begin(), bias.f32.end()));
    plexus::test::Tensor<float> both(8);
    const plx_host_api* api = host.services().table_for("moe");
    plx_group world = nullptr;
    BOOST_TEST_REQUIRE(api->group_get(api->ctx, "world", &world) == PLX_OK);
    BOOST_TEST_REQUIRE(api->all_gather(api->ctx, world, own.view(), both.view(), nullptr, nullptr) == PLX_OK);
    BOOST_TEST(std::memcmp(both.values.data(), both.values.data() + 4, 4 * sizeof(float)) == 0);
  }
  runtime.reset();
}

BOOST_AUTO_TEST_SUITE_END()

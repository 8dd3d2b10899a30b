// The fsdp data-parallel strategies across real processes (2 and 4 ranks under mpirun, comm
// "mpi"), driven directly through the plugin host as the engine drives them. Units over "dp" and
// over "halves" (a group of N/2 ranks, as "expert_dp" is for MoE experts, with grad_scale 1/2),
// one replicated unit, each strategy: the shard gradients after three accumulation rounds are the
// mean over the group's ranks times grad_scale; after_update leaves every rank's whole values equal
// to the concatenation of the shards each rank wrote; ZeRO-3 gathers on acquire, and a prefetch
// followed by the acquire gives the same values; gather makes a shard-laid tensor whole; memory()
// holds what is sharded at 1/N of the whole (plus at most 16 padding elements per rank).
#define BOOST_TEST_MODULE fsdp_strategies
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <memory>
#include <string>
#include <vector>

#include "comm_harness.hpp"
#include "fsdp_harness.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/run_config.hpp"
#include "skip_module.hpp"
#include "per_process.hpp"

namespace utf = boost::unit_test;
namespace tt = boost::test_tools;
using plexus::distributed::LaunchEnv;
using plexus::distributed::Runtime;
using plexus::test::count_of;
using plexus::test::Job;
using plexus::test::under_mpirun;
using namespace plexus::test::fsdp;

PLEXUS_SKIP_MODULE_UNLESS(std::filesystem::exists(plexus::test::plugin_file("comm_mpi")) &&
                              (under_mpirun() || plexus::test::have_mpirun()),
                          "needs the comm_mpi plugin (a build with MPI) and mpirun")

namespace {

utf::assertion_result in_ranks(utf::test_unit_id) { return utf::assertion_result(under_mpirun()); }
utf::assertion_result in_launcher(utf::test_unit_id) { return utf::assertion_result(!under_mpirun()); }

// The runtime over every rank, with the "halves" groups: {0 .. N/2-1} and {N/2 .. N-1}.
struct Started {
  plexus::PluginHost host;
  std::unique_ptr<Runtime> runtime;
  const plexus::Component* fsdp = nullptr;
  Started() {
    runtime = Runtime::start(host, plexus::load_run_config(std::nullopt, {"distributed.timeout_s=30"}),
                             {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false},
                             LaunchEnv::from_process());
    const int32_t n = runtime->world_size(), half = n / 2;
    std::vector<std::vector<int32_t>> halves(2);
    for (int32_t r = 0; r < n; ++r) halves[static_cast<std::size_t>(r / half)].push_back(r);
    runtime->create_groups("halves", halves);
    fsdp = &load_fsdp(host);
  }
};
// MPI starts once per process: one runtime for every test case, stopped after the last.
Started& started() {
  return plexus::test::per_process<Started>();
}
using StopAtTheEnd = plexus::test::DestroyAtTheEnd<Started>;
BOOST_TEST_GLOBAL_FIXTURE(StopAtTheEnd);

// float32 sums of three contributions and one average: a few ulps apart from the double
// reference (about 1e-7 relative); 1e-5 leaves room for any order the backend reduces in.
constexpr double kTolerance = 1e-5;
constexpr int kRounds = 3;

struct Case {
  UnitSpec spec;
  int32_t group_rank = 0;
  int32_t group_size = 1;
  int32_t group_first = 0;  // the world rank of the group's rank 0
};

std::vector<Case> cases(int32_t rank, int32_t n) {
  const int32_t half = n / 2;
  return {
      {UnitSpec{"embedding", 37}, rank, n, 0},
      {UnitSpec{"decoder.layers.0 (expert_dp)", 53, "halves", 0, 0.5}, rank % half, half, rank / half * half},
      {UnitSpec{"final_layernorm", 21, "dp", PLX_DP_UNIT_REPLICATED}, rank, n, 0},
      {UnitSpec{"decoder.layers.1", 1000}, rank, n, 0},
  };
}

float initial_value(uint32_t unit, int64_t i) { return 1000.0f * static_cast<float>(unit) + 0.5f * static_cast<float>(i); }
// World rank r's gradient contribution in round k.
double contribution(int32_t world_rank, int k, int64_t i) {
  return (world_rank + 1) * (k + 1) + 0.01 * static_cast<double>(i);
}
// What a sharded unit's rank writes at its shard's element j (different on every rank).
float written(int32_t group_rank, int64_t j) { return 100.0f * static_cast<float>(group_rank + 1) + static_cast<float>(j); }

void check_strategy(const std::string& strategy) {
  Started& s = started();
  const int32_t rank = s.runtime->rank(), n = s.runtime->world_size();
  const std::vector<Case> units = cases(rank, n);
  std::vector<UnitSpec> specs;
  for (const Case& c : units) specs.push_back(c.spec);
  Strategy st(*s.fsdp, options_for(strategy), specs);
  const auto count = static_cast<uint32_t>(units.size());
  std::vector<plx_dp_layout> layouts;
  for (uint32_t u = 0; u < count; ++u) layouts.push_back(st.layout(u));

  // 1. Initial values written whole (the same on every rank), read back whole.
  for (uint32_t u = 0; u < count; ++u) {
    const Span w = st.acquire(u, PLX_DP_WRITE);
    for (int64_t i = 0; i < units[u].spec.numel; ++i) w[i] = initial_value(u, i);
    st.release(u, PLX_DP_WRITE);
  }
  for (uint32_t u = 0; u < count; ++u) {
    const Span r = st.acquire(u, PLX_DP_READ);
    BOOST_TEST_REQUIRE(r.size == layouts[u].padded_numel);
    for (int64_t i = 0; i < r.size; ++i)
      BOOST_TEST_REQUIRE(r[i] == (i < units[u].spec.numel ? initial_value(u, i) : 0.0f), "unit " << u << " [" << i << "]");
    st.release(u, PLX_DP_READ);
  }

  // 2. One step: three rounds of backward in reverse unit order, the next unit prefetched
  //    under the current one, as the engine calls them.
  st.begin_step();
  for (int k = 0; k < kRounds; ++k) {
    for (uint32_t u = count; u-- > 0;) {
      st.acquire(u, PLX_DP_BACKWARD);
      if (u > 0) st.prefetch(u - 1, PLX_DP_BACKWARD);
      const Span g = st.grads(u);
      for (int64_t i = 0; i < units[u].spec.numel; ++i) g[i] += static_cast<float>(contribution(rank, k, i));
      st.release(u, PLX_DP_BACKWARD);
      st.grads_ready(u, k == kRounds - 1);
    }
  }
  st.finish_grads();
  for (uint32_t u = 0; u < count; ++u) {
    const Case& c = units[u];
    const plx_dp_layout& l = layouts[u];
    const Span g = st.shard(u).second;
    BOOST_TEST_REQUIRE(g.size == l.shard_numel);
    for (int64_t j = 0; j < g.size; ++j) {
      const int64_t i = l.shard_offset + j;
      double expected = 0;
      if (i < c.spec.numel) {
        for (int32_t m = c.group_first; m < c.group_first + c.group_size; ++m)
          for (int k = 0; k < kRounds; ++k) expected += contribution(m, k, i);
        expected = expected / c.group_size * c.spec.grad_scale;
      }
      BOOST_TEST_INFO("unit " << u << " element " << i);
      BOOST_TEST(static_cast<double>(g[j]) == expected, tt::tolerance(kTolerance));
    }
  }

  // 3. Between steps: what is sharded is held at 1/N of the unit (plus the padding).
  const bool sharded_values = strategy == "optim_grads_params";
  const bool sharded_grads = sharded_values || strategy == "optim_grads";
  uint64_t values_expected = 0, grads_expected = 0;
  for (uint32_t u = 0; u < count; ++u) {
    const Case& c = units[u];
    const plx_dp_layout& l = layouts[u];
    const bool replicated = (c.spec.flags & PLX_DP_UNIT_REPLICATED) != 0;
    if (strategy == "no_shard" || replicated) {
      BOOST_TEST(l.flags == 0u);
      BOOST_TEST(l.padded_numel == c.spec.numel);
      values_expected += static_cast<uint64_t>(c.spec.numel) * sizeof(float);
      grads_expected += static_cast<uint64_t>(c.spec.numel) * sizeof(float);
      continue;
    }
    BOOST_TEST(l.shard_numel * c.group_size == l.padded_numel);
    BOOST_TEST(l.shard_offset == l.shard_numel * c.group_rank);
    BOOST_TEST(l.shard_numel <= (c.spec.numel + c.group_size - 1) / c.group_size + 16);
    const uint64_t shard = static_cast<uint64_t>(l.shard_numel) * sizeof(float);
    const uint64_t whole = static_cast<uint64_t>(l.padded_numel) * sizeof(float);
    values_expected += sharded_values ? shard : whole;
    grads_expected += sharded_grads ? shard : whole + shard;  // optim: the whole buffer and the shard's
  }
  const plx_dp_memory m = st.memory();
  BOOST_TEST(m.param_bytes == values_expected);
  BOOST_TEST(m.grad_bytes == grads_expected);

  // 4. The optimizer writes its shards (different on every rank where sharded); after_update
  //    makes every rank's whole values the concatenation of the shards.
  for (uint32_t u = 0; u < count; ++u) {
    const Span v = st.shard(u).first;
    const bool sharded = (layouts[u].flags & PLX_DP_OPTIM_SHARDED) != 0;
    for (int64_t j = 0; j < v.size; ++j) v[j] = sharded ? written(units[u].group_rank, j) : 7.0f + static_cast<float>(j);
  }
  st.after_update();
  auto whole_value = [&](uint32_t u, int64_t i) {
    const plx_dp_layout& l = layouts[u];
    if ((l.flags & PLX_DP_OPTIM_SHARDED) == 0) return 7.0f + static_cast<float>(i);
    return written(static_cast<int32_t>(i / l.shard_numel), i % l.shard_numel);
  };
  for (uint32_t u = 0; u < count; ++u) {
    const Span r = st.acquire(u, PLX_DP_READ);
    for (int64_t i = 0; i < r.size; ++i) BOOST_TEST_REQUIRE(r[i] == whole_value(u, i), "unit " << u << " [" << i << "]");
    st.release(u, PLX_DP_READ);
    // A prefetch followed by the acquire gives what the acquire alone gave.
    st.prefetch(u, PLX_DP_FORWARD);
    const Span f = st.acquire(u, PLX_DP_FORWARD);
    for (int64_t i = 0; i < f.size; ++i) BOOST_TEST_REQUIRE(f[i] == whole_value(u, i), "unit " << u << " [" << i << "]");
    st.release(u, PLX_DP_FORWARD);
  }
  if (sharded_values) BOOST_TEST(st.memory().param_bytes == values_expected);  // every whole copy freed

  // 5. gather: a shard-laid tensor (an optimizer moment) made whole on every rank.
  for (uint32_t u = 0; u < count; ++u) {
    const plx_dp_layout& l = layouts[u];
    const bool sharded = (l.flags & PLX_DP_OPTIM_SHARDED) != 0;
    std::vector<float> part(static_cast<std::size_t>(l.shard_numel)), full(static_cast<std::size_t>(l.padded_numel));
    for (std::size_t j = 0; j < part.size(); ++j)
      part[j] = sharded ? written(units[u].group_rank, static_cast<int64_t>(j)) : 7.0f + static_cast<float>(j);
    st.gather(u, part, full);
    for (std::size_t i = 0; i < full.size(); ++i)
      BOOST_TEST_REQUIRE(full[i] == whole_value(u, static_cast<int64_t>(i)), "unit " << u << " [" << i << "]");
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(launcher, *utf::precondition(in_launcher))

BOOST_AUTO_TEST_CASE(every_strategy_passes_on_2_and_4_ranks) {
  for (int ranks : {2, 4}) {
    const Job job = plexus::test::mpirun(ranks, "--run_test=ranks");
    BOOST_TEST_INFO("mpirun -np " << ranks << " (" << job.seconds << " s):\n" << job.output);
    BOOST_TEST(job.status == 0);
    BOOST_TEST(count_of(job.output, "*** No errors detected") == static_cast<std::size_t>(ranks));
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ranks, *utf::precondition(in_ranks))

BOOST_AUTO_TEST_CASE(no_shard) { check_strategy("no_shard"); }
BOOST_AUTO_TEST_CASE(optim) { check_strategy("optim"); }
BOOST_AUTO_TEST_CASE(optim_grads) { check_strategy("optim_grads"); }
BOOST_AUTO_TEST_CASE(optim_grads_params) { check_strategy("optim_grads_params"); }

BOOST_AUTO_TEST_SUITE_END()

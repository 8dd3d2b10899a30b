// The fsdp data-parallel strategies in one process (comm "local", every group one rank), loaded
// from the built plugin through the real plugin host: each strategy's layout and padding,
// ZeRO-3's counted acquires and the copies it holds, WRITE then READ, gradients zeroed at
// begin_step and accumulated with +=, grad_scale, prefetch, gather, and each refusal's message.
// The same strategies across real processes: tests/mpi/test_fsdp_strategies.cpp.
#define BOOST_TEST_MODULE fsdp_strategy
#include <boost/test/unit_test.hpp>

#include <memory>
#include <string>
#include <vector>

#include "fsdp_harness.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/run_config.hpp"

using namespace plexus::test::fsdp;
using plexus::distributed::LaunchEnv;
using plexus::distributed::Runtime;

namespace {

// One host with the fsdp plugin and a one-rank runtime (its "dp" group), for every test case.
struct World {
  plexus::PluginHost host;
  std::unique_ptr<Runtime> runtime;
  const plexus::Component* fsdp = nullptr;
  World() {
    runtime = Runtime::start(host, plexus::load_run_config(std::nullopt, {}),
                             {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false}, LaunchEnv{});
    fsdp = &load_fsdp(host);
  }
};
World& world() {
  static World w;
  return w;
}
const plexus::Component& fsdp() { return *world().fsdp; }

constexpr int64_t kNumel = 37;  // not a multiple of 16: the sharded strategies pad it to 48
constexpr uint64_t kF = sizeof(float);

std::vector<UnitSpec> one_unit(int64_t numel = kNumel) { return {UnitSpec{"decoder.layers.0", numel}}; }

}  // namespace

BOOST_AUTO_TEST_CASE(each_strategy_lays_the_unit_out_and_pads_only_when_sharding) {
  struct Expected {
    std::string strategy;
    uint32_t flags;
    int64_t padded;
  };
  const std::vector<Expected> cases = {
      {"no_shard", 0u, kNumel},
      {"optim", PLX_DP_OPTIM_SHARDED, 48},
      {"optim_grads", PLX_DP_OPTIM_SHARDED | PLX_DP_GRADS_SHARDED, 48},
      {"optim_grads_params", PLX_DP_OPTIM_SHARDED | PLX_DP_GRADS_SHARDED | PLX_DP_PARAMS_SHARDED, 48}};
  for (const Expected& e : cases) {
    BOOST_TEST_CONTEXT(e.strategy) {
      Strategy s(fsdp(), options_for(e.strategy),
                 {UnitSpec{"embedding", kNumel}, UnitSpec{"norm", kNumel, "dp", PLX_DP_UNIT_REPLICATED}});
      const plx_dp_layout l = s.layout(0);
      BOOST_TEST(l.flags == e.flags);
      BOOST_TEST(l.padded_numel == e.padded);
      BOOST_TEST(l.shard_offset == 0);
      BOOST_TEST(l.shard_numel == e.padded);  // one rank: the shard is everything
      // A replicated unit is kept whole whatever the strategy.
      const plx_dp_layout r = s.layout(1);
      BOOST_TEST(r.flags == 0u);
      BOOST_TEST(r.padded_numel == kNumel);
      BOOST_TEST(r.shard_numel == kNumel);
      // What is persistent: ZeRO-3 holds the values' shard only; ZeRO-2/3 hold no whole gradient.
      const plx_dp_memory m = s.memory();
      const uint64_t whole = static_cast<uint64_t>(e.padded) * kF, replicated = kNumel * kF;
      BOOST_TEST(m.param_bytes == whole + replicated);  // the shard is whole on one rank
      const uint64_t grads = e.strategy == "no_shard" ? whole : e.strategy == "optim" ? 2 * whole : whole;
      BOOST_TEST(m.grad_bytes == grads + replicated);
    }
  }
}

BOOST_AUTO_TEST_CASE(zero3_acquires_are_counted_and_the_last_release_frees_the_whole_copy) {
  Strategy s(fsdp(), options_for("optim_grads_params"), one_unit());
  const uint64_t shard = 48 * kF;
  BOOST_TEST(s.memory().param_bytes == shard);
  const Span a = s.acquire(0, PLX_DP_FORWARD);
  BOOST_TEST(a.size == 48);
  BOOST_TEST(s.memory().param_bytes == 2 * shard);
  const Span b = s.acquire(0, PLX_DP_BACKWARD);
  BOOST_TEST(b.data == a.data);  // the same whole copy, counted twice
  BOOST_TEST(s.memory().param_bytes == 2 * shard);
  s.release(0, PLX_DP_FORWARD);
  BOOST_TEST(s.memory().param_bytes == 2 * shard);  // still held for BACKWARD
  s.release(0, PLX_DP_BACKWARD);
  BOOST_TEST(s.memory().param_bytes == shard);
  BOOST_TEST(s.memory().peak_param_bytes == 2 * shard);

  const Outcome extra = s.try_release(0, PLX_DP_BACKWARD);
  BOOST_TEST(extra.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(extra.says("release(BACKWARD) of unit 'decoder.layers.0' without an acquire for BACKWARD"),
             extra.message);
}

BOOST_AUTO_TEST_CASE(write_then_read_gives_back_the_values_under_every_strategy) {
  for (const std::string& strategy : all_strategies()) {
    BOOST_TEST_CONTEXT(strategy) {
      Strategy s(fsdp(), options_for(strategy), one_unit());
      const Span w = s.acquire(0, PLX_DP_WRITE);
      for (int64_t i = 0; i < w.size; ++i) BOOST_TEST_REQUIRE(w[i] == 0.0f);  // handed out zeroed
      for (int64_t i = 0; i < kNumel; ++i) w[i] = 0.5f * static_cast<float>(i) + 1.0f;
      s.release(0, PLX_DP_WRITE);
      const Span r = s.acquire(0, PLX_DP_READ);
      for (int64_t i = 0; i < kNumel; ++i) BOOST_TEST(r[i] == 0.5f * static_cast<float>(i) + 1.0f);
      for (int64_t i = kNumel; i < r.size; ++i) BOOST_TEST(r[i] == 0.0f);  // the padding stays zero
      // The optimizer's shard sees the same values.
      const Span v = s.shard(0).first;
      for (int64_t i = 0; i < kNumel; ++i) BOOST_TEST(v[i] == r[i]);
      s.release(0, PLX_DP_READ);
    }
  }
}

BOOST_AUTO_TEST_CASE(gradients_start_at_zero_each_step_and_accumulate) {
  for (const std::string& strategy : all_strategies()) {
    BOOST_TEST_CONTEXT(strategy) {
      Strategy s(fsdp(), options_for(strategy), one_unit());
      for (int step = 0; step < 2; ++step) {
        s.begin_step();
        Span g = s.grads(0);
        for (int64_t i = 0; i < g.size; ++i) BOOST_TEST_REQUIRE(g[i] == 0.0f);
        for (int64_t i = 0; i < kNumel; ++i) g[i] += 1.0f + static_cast<float>(i);
        s.grads_ready(0, false);
        g = s.grads(0);
        for (int64_t i = 0; i < kNumel; ++i) g[i] += 2.0f;
        s.grads_ready(0, true);
        s.finish_grads();
        const Span sg = s.shard(0).second;
        // One rank: the mean over ranks is this rank's sum of the two contributions.
        for (int64_t i = 0; i < kNumel; ++i) BOOST_TEST(sg[i] == 3.0f + static_cast<float>(i));
        for (int64_t i = kNumel; i < sg.size; ++i) BOOST_TEST(sg[i] == 0.0f);
      }
      // ZeRO-2/3 keep no whole gradient between steps; no_shard and optim keep theirs.
      const uint64_t grad_bytes = s.memory().grad_bytes;
      if (strategy == "optim_grads" || strategy == "optim_grads_params") BOOST_TEST(grad_bytes == 48 * kF);
      if (strategy == "no_shard") BOOST_TEST(grad_bytes == kNumel * kF);
      if (strategy == "optim") BOOST_TEST(grad_bytes == 2 * 48 * kF);
    }
  }
}

BOOST_AUTO_TEST_CASE(grad_scale_multiplies_the_averaged_gradient) {
  for (const std::string& strategy : all_strategies()) {
    BOOST_TEST_CONTEXT(strategy) {
      Strategy s(fsdp(), options_for(strategy), {UnitSpec{"experts", kNumel, "dp", 0, 0.25}});
      s.begin_step();
      const Span g = s.grads(0);
      for (int64_t i = 0; i < kNumel; ++i) g[i] = 8.0f;
      s.grads_ready(0, true);
      s.finish_grads();
      const Span sg = s.shard(0).second;
      for (int64_t i = 0; i < kNumel; ++i) BOOST_TEST(sg[i] == 2.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE(prefetch_gathers_once_and_the_acquire_uses_it) {
  Strategy s(fsdp(), options_for("optim_grads_params"), one_unit());
  Span w = s.acquire(0, PLX_DP_WRITE);
  for (int64_t i = 0; i < kNumel; ++i) w[i] = static_cast<float>(3 * i);
  s.release(0, PLX_DP_WRITE);
  const uint64_t shard = 48 * kF;
  s.prefetch(0, PLX_DP_FORWARD);
  BOOST_TEST(s.memory().param_bytes == 2 * shard);  // the whole copy is on its way
  s.prefetch(0, PLX_DP_FORWARD);                    // already gathering: nothing more
  BOOST_TEST(s.memory().param_bytes == 2 * shard);
  const Span a = s.acquire(0, PLX_DP_FORWARD);
  BOOST_TEST(s.memory().peak_param_bytes == 2 * shard);
  for (int64_t i = 0; i < kNumel; ++i) BOOST_TEST(a[i] == static_cast<float>(3 * i));
  s.release(0, PLX_DP_FORWARD);
  BOOST_TEST(s.memory().param_bytes == shard);

  // "prefetch": false turns the hint into nothing; the acquire still gathers.
  Strategy off(fsdp(), options_for("optim_grads_params", false), one_unit());
  off.prefetch(0, PLX_DP_FORWARD);
  BOOST_TEST(off.memory().param_bytes == shard);
  off.acquire(0, PLX_DP_FORWARD);
  BOOST_TEST(off.memory().param_bytes == 2 * shard);
  off.release(0, PLX_DP_FORWARD);

  // A WRITE after a prefetch frees the prefetched copy (stale once written) before making its own.
  Strategy rewrite(fsdp(), options_for("optim_grads_params"), one_unit());
  rewrite.prefetch(0, PLX_DP_FORWARD);
  const Span x = rewrite.acquire(0, PLX_DP_WRITE);
  for (int64_t i = 0; i < x.size; ++i) BOOST_TEST_REQUIRE(x[i] == 0.0f);
  for (int64_t i = 0; i < kNumel; ++i) x[i] = 9.0f;
  rewrite.release(0, PLX_DP_WRITE);
  BOOST_TEST(rewrite.memory().peak_param_bytes == 2 * shard);
  const Span y = rewrite.acquire(0, PLX_DP_READ);
  for (int64_t i = 0; i < kNumel; ++i) BOOST_TEST(y[i] == 9.0f);
  rewrite.release(0, PLX_DP_READ);
}

BOOST_AUTO_TEST_CASE(gather_makes_a_shard_laid_tensor_whole) {
  for (const std::string& strategy : all_strategies()) {
    BOOST_TEST_CONTEXT(strategy) {
      Strategy s(fsdp(), options_for(strategy), one_unit());
      const plx_dp_layout l = s.layout(0);
      std::vector<float> part(static_cast<std::size_t>(l.shard_numel)), full(static_cast<std::size_t>(l.padded_numel));
      for (std::size_t i = 0; i < part.size(); ++i) part[i] = 1.5f * static_cast<float>(i);
      s.gather(0, part, full);
      BOOST_TEST(full == part, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(the_schema_fills_the_defaults_and_catches_mistyped_keys) {
  const auto schema = plexus::config::Schema::parse(fsdp().config_schema, "fsdp");
  boost::json::value options = boost::json::object{};
  plexus::config::validate(options, schema, "distributed.data_parallel.options");
  BOOST_TEST(options.at("strategy").as_string() == "no_shard");
  BOOST_TEST(options.at("prefetch").as_bool() == true);
  boost::json::value typo = boost::json::parse(R"({"stratgy": "optim"})");
  try {
    plexus::config::validate(typo, schema, "distributed.data_parallel.options");
    BOOST_FAIL("a mistyped key was accepted");
  } catch (const std::exception& e) {
    BOOST_TEST(std::string(e.what()).find("did you mean 'strategy'") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_strategy_is_refused_naming_the_key_and_the_nearest_value) {
  const Outcome o = Strategy::create(fsdp(), R"({"strategy": "optim_grad"})", one_unit());
  BOOST_TEST(o.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(o.says("distributed.data_parallel.options.strategy"), o.message);
  BOOST_TEST(o.says("unknown strategy 'optim_grad'"), o.message);
  BOOST_TEST(o.says("did you mean 'optim_grads'?"), o.message);
  const Outcome zero = Strategy::create(fsdp(), R"({"strategy": "zero3"})", one_unit());
  BOOST_TEST(zero.says("expected one of no_shard, optim, optim_grads, optim_grads_params"), zero.message);
}

BOOST_AUTO_TEST_CASE(bad_units_are_refused_naming_the_unit) {
  const Outcome group = Strategy::create(fsdp(), "{}", {UnitSpec{"moe.experts", 8, "expert_dpp"}});
  BOOST_TEST(group.status == PLX_ERR_NOT_FOUND);
  BOOST_TEST(group.says("unit 'moe.experts': the topology has no group 'expert_dpp'"), group.message);

  UnitSpec f64{"embedding", 8};
  f64.dtype = plx_dtype_f64();
  const Outcome dtype = Strategy::create(fsdp(), "{}", {f64});
  BOOST_TEST(dtype.status == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(dtype.says("unit 'embedding': dtype float64; the fsdp strategies hold float32"), dtype.message);

  UnitSpec opencl{"embedding", 8};
  opencl.device = DLDevice{kDLOpenCL, 0};
  const Outcome device = Strategy::create(fsdp(), "{}", {opencl});
  BOOST_TEST(device.status == PLX_ERR_UNSUPPORTED);
  BOOST_TEST(device.says("unit 'embedding': on device type 4:0"), device.message);

  const Outcome empty = Strategy::create(fsdp(), "{}", {UnitSpec{"nothing", 0}});
  BOOST_TEST(empty.says("unit 'nothing': numel 0"), empty.message);
}

BOOST_AUTO_TEST_CASE(calls_out_of_order_or_out_of_range_are_refused) {
  Strategy s(fsdp(), options_for("optim_grads_params"), one_unit());
  DLTensor t{};
  const Outcome range = outcome(s.table().acquire(s.instance(), 3, PLX_DP_FORWARD, &t));
  BOOST_TEST(range.status == PLX_ERR_INVALID_ARGUMENT);
  BOOST_TEST(range.says("acquire: unit 3 is out of range (the strategy has 1 units)"), range.message);

  s.acquire(0, PLX_DP_READ);
  const Outcome write = outcome(s.table().acquire(s.instance(), 0, PLX_DP_WRITE, &t));
  BOOST_TEST(write.says("acquire(WRITE) of unit 'decoder.layers.0' while it is acquired"), write.message);
  s.release(0, PLX_DP_READ);

  s.begin_step();
  s.grads(0);
  s.grads_ready(0, true);
  const Outcome again = s.try_grads_ready(0, true);
  BOOST_TEST(again.says("grads_ready of unit 'decoder.layers.0' after its last grads_ready"), again.message);
  s.finish_grads();

  s.begin_step();
  s.grads(0);
  const Outcome unready = s.try_finish_grads();
  BOOST_TEST(unready.says("the gradients of unit 'decoder.layers.0' were handed out by grads but never marked ready"),
             unready.message);

  // DDP averages at the last grads_ready only: a step without one is refused, not left local.
  Strategy ddp(fsdp(), options_for("no_shard"), one_unit());
  ddp.begin_step();
  ddp.grads(0);
  ddp.grads_ready(0, false);
  const Outcome never_last = ddp.try_finish_grads();
  BOOST_TEST(never_last.says("unit 'decoder.layers.0' were never marked the step's last"), never_last.message);
}

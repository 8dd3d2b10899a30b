#define BOOST_TEST_MODULE unit_combined_1f1b_schedule
#include <boost/json/object.hpp>
#include <boost/test/unit_test.hpp>

// The combined_1f1b scheduler (the real built plugin, through its C table) drives a recording
// stand-in for the engine. The stand-in enforces the engine's order rules on every call, as
// framework/src/engine/model_run.cpp does (forward of a unit after the previous unit, stages in
// order; backward after the whole forward, units and stages in reverse; split weight gradients
// after their unit's backward), and records the calls, so the tests check both that the order is
// legal and that it is the documented interleaving.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/errors.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/plexus.h"

namespace {

namespace fs = std::filesystem;

struct Call {
  char what;  // 'F' forward, 'B' backward, 'W' weight gradients
  uint32_t mb, unit, stage;
  bool comm_stream;
  bool operator==(const Call&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Call& c) {
  return os << c.what << "(mb " << c.mb << ", unit " << c.unit << ", stage " << c.stage << (c.comm_stream ? ", comm)" : ")");
}

constexpr bool C = false;  // a compute stage
constexpr bool M = true;   // a communication stage

// The engine's side: units with the given stage kinds. Every call is checked against the
// engine's rules before it is recorded; a violation is recorded in `violations`.
class RuleKeepingEngine {
 public:
  std::vector<Call> calls;
  std::vector<std::string> violations;
  int64_t fail_call = -1;  // this call (0-based) returns PLX_ERR_COMM

  explicit RuleKeepingEngine(std::vector<std::vector<bool>> units) : units_(std::move(units)) {}

  plx_schedule_env env(uint32_t microbatches, bool split_weight_grads) {
    microbatches_.assign(microbatches, Progress{});
    for (Progress& p : microbatches_) p.weights_done.assign(units_.size(), false);
    plx_schedule_env e{};
    e.struct_size = sizeof(e);
    e.num_microbatches = microbatches;
    e.num_units = static_cast<uint32_t>(units_.size());
    e.ctx = this;
    e.compute_stream = reinterpret_cast<plx_stream>(&compute_tag_);
    e.comm_stream = reinterpret_cast<plx_stream>(&comm_tag_);
    e.unit_num_stages = &num_stages;
    e.unit_stage = &stage_info;
    e.forward = &forward;
    e.backward = &backward;
    // The engine offers the split; the scheduler takes it by calling split_weight_gradients.
    e.backward_weights = split_weight_grads ? &backward_weights : nullptr;
    e.split_weight_gradients = split_weight_grads ? &split_weight_gradients : nullptr;
    split_ = false;
    return e;
  }
  bool split_asked() const { return split_; }

  // Every microbatch ran its whole forward and backward (and weight gradients when split).
  bool all_complete() const {
    for (const Progress& p : microbatches_) {
      if (!p.forward_done || p.backward_unit != -1) return false;
      if (split_ && std::find(p.weights_done.begin(), p.weights_done.end(), false) != p.weights_done.end())
        return false;
    }
    return true;
  }
  bool is_comm(uint32_t unit, uint32_t stage) const { return units_[unit][stage]; }

 private:
  struct Progress {
    uint32_t forward_unit = 0, forward_stage = 0;
    bool forward_done = false;
    int64_t backward_unit = -2;  // -2: not started
    uint32_t backward_stage = 0;
    std::vector<bool> weights_done;
  };
  std::vector<std::vector<bool>> units_;
  std::vector<Progress> microbatches_;
  bool split_ = false;
  char compute_tag_ = 0;
  char comm_tag_ = 0;

  static RuleKeepingEngine& self(void* ctx) { return *static_cast<RuleKeepingEngine*>(ctx); }

  void violated(const Call& c, const std::string& why) {
    std::ostringstream text;
    text << c << ": " << why;
    violations.push_back(text.str());
  }
  plx_status record(const Call& c) {
    calls.push_back(c);
    return static_cast<int64_t>(calls.size()) - 1 == fail_call ? PLX_ERR_COMM : PLX_OK;
  }
  void check_stream(const Call& c) {
    if (c.comm_stream != units_[c.unit][c.stage]) violated(c, "on the wrong stream");
  }

  static plx_status num_stages(void* ctx, uint32_t unit, uint32_t* out) noexcept {
    if (unit >= self(ctx).units_.size()) return PLX_ERR_INVALID_ARGUMENT;
    *out = static_cast<uint32_t>(self(ctx).units_[unit].size());
    return PLX_OK;
  }
  static plx_status stage_info(void* ctx, uint32_t unit, uint32_t stage, plx_stage_info* out) noexcept {
    const auto& units = self(ctx).units_;
    if (unit >= units.size() || stage >= units[unit].size()) return PLX_ERR_INVALID_ARGUMENT;
    out->kind = units[unit][stage] ? PLX_STAGE_COMM : PLX_STAGE_COMPUTE;
    out->name = units[unit][stage] ? "all_to_all" : "compute";
    return PLX_OK;
  }
  static plx_status forward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream stream) noexcept {
    RuleKeepingEngine& e = self(ctx);
    const Call c{'F', mb, unit, stage, stream == reinterpret_cast<plx_stream>(&e.comm_tag_)};
    Progress& p = e.microbatches_.at(mb);
    if (p.forward_done || unit != p.forward_unit || stage != p.forward_stage) {
      e.violated(c, "forward out of order");
    } else {
      e.check_stream(c);
      if (++p.forward_stage == e.units_[unit].size()) {
        p.forward_stage = 0;
        if (++p.forward_unit == e.units_.size()) {
          p.forward_done = true;
          p.backward_unit = static_cast<int64_t>(e.units_.size()) - 1;
          p.backward_stage = static_cast<uint32_t>(e.units_.back().size()) - 1;
        }
      }
    }
    return e.record(c);
  }
  static plx_status backward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream stream) noexcept {
    RuleKeepingEngine& e = self(ctx);
    const Call c{'B', mb, unit, stage, stream == reinterpret_cast<plx_stream>(&e.comm_tag_)};
    Progress& p = e.microbatches_.at(mb);
    if (!p.forward_done || static_cast<int64_t>(unit) != p.backward_unit || stage != p.backward_stage) {
      e.violated(c, "backward out of order");
    } else {
      e.check_stream(c);
      if (stage > 0) {
        --p.backward_stage;
      } else if (--p.backward_unit >= 0) {
        p.backward_stage = static_cast<uint32_t>(e.units_[p.backward_unit].size()) - 1;
      }
    }
    return e.record(c);
  }
  static plx_status split_weight_gradients(void* ctx) noexcept {
    RuleKeepingEngine& e = self(ctx);
    for (const Call& c : e.calls)
      if (c.what == 'B') {
        e.violations.push_back("split_weight_gradients after the step's first backward call");
        break;
      }
    e.split_ = true;
    return PLX_OK;
  }
  static plx_status backward_weights(void* ctx, uint32_t mb, uint32_t unit, plx_stream stream) noexcept {
    RuleKeepingEngine& e = self(ctx);
    const Call c{'W', mb, unit, 0, stream == reinterpret_cast<plx_stream>(&e.comm_tag_)};
    Progress& p = e.microbatches_.at(mb);
    if (!e.split_)
      e.violated(c, "weight gradients without asking for them apart (split_weight_gradients)");
    else if (!p.forward_done || p.backward_unit >= static_cast<int64_t>(unit) || p.weights_done.at(unit))
      e.violated(c, "weight gradients before the unit's backward, or twice");
    else if (c.comm_stream)
      e.violated(c, "weight gradients on the communication stream");
    else
      p.weights_done[unit] = true;
    return e.record(c);
  }
};

fs::path plugin_file() {
  return fs::path(std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins/libplexus_combined_1f1b.so");
}

struct Scheduler {
  plexus::PluginHost host;
  plexus::ConfigHandle config;
  std::unique_ptr<plexus::SchedulerInstance> scheduler;
  explicit Scheduler(boost::json::object options = {}) : config(std::move(options), "scheduler.options") {
    if (!fs::exists(plugin_file()))
      throw std::runtime_error("the combined_1f1b plugin is not built: " + plugin_file().string() + " is missing");
    host.load(plugin_file());
    scheduler = std::make_unique<plexus::SchedulerInstance>(host.get(PLX_KIND_SCHEDULER, "combined_1f1b"), config.get());
  }
  std::vector<Call> run(RuleKeepingEngine& engine, uint32_t microbatches, bool split) {
    scheduler->run_step(engine.env(microbatches, split));
    BOOST_TEST(engine.violations.empty(), "the engine's order rules hold");
    for (const std::string& v : engine.violations) BOOST_TEST_MESSAGE("violation: " << v);
    BOOST_TEST(engine.all_complete(), "every microbatch ran its forward, backward and weight gradients");
    return engine.calls;
  }
};

// The calls of one microbatch alone, as the sequential scheduler makes them (no split weights).
std::vector<Call> alone(char what, uint32_t mb, const std::vector<bool>& stages) {
  std::vector<Call> calls;
  const auto n = static_cast<uint32_t>(stages.size());
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t s = what == 'F' ? i : n - 1 - i;
    calls.push_back({what, mb, 0, s, stages[s]});
  }
  return calls;
}

// Shapes the property tests cover: Megatron's MoE layer (attention+router | dispatch | experts |
// combine), dense units around it, groups whose comm stages come back to back, and a unit that
// starts with a comm stage.
const std::vector<std::vector<std::vector<bool>>> kShapes = {
    {{C}, {C, M, C, M}, {C}, {C}},
    {{C}, {C, M, C, M}, {C}, {C, M, C, M}, {C}, {C}},
    {{C}, {C, C}, {C, M, C, M}, {C, M, C, M, C}, {C}},
    {{C}, {M, C}, {C, M, M, C}, {C}},
    {{C, M, C, M}},
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(combined_1f1b, Scheduler)

// One MoE unit (pre-dispatch | dispatch | experts | combine), two microbatches: forward(0)
// alone, then Megatron's node order, then backward(1) alone. Per slot the comm stage is issued
// first and the other microbatch's compute stage runs while it is in flight.
BOOST_AUTO_TEST_CASE(megatron_node_order_for_one_moe_unit) {
  const std::vector<bool> moe{C, M, C, M};
  RuleKeepingEngine engine({moe});
  const std::vector<Call> calls = run(engine, 2, false);
  std::vector<Call> expected = alone('F', 0, moe);
  const std::vector<Call> combined{
      {'B', 0, 0, 3, M},  // combine backward starts ...
      {'F', 1, 0, 0, C},  // ... under the next microbatch's attention + router
      {'F', 1, 0, 1, M},  // dispatch forward starts ...
      {'B', 0, 0, 2, C},  // ... under the experts' backward
      {'B', 0, 0, 1, M},  // dispatch backward starts ...
      {'F', 1, 0, 2, C},  // ... under the experts' forward
      {'F', 1, 0, 3, M},  // combine forward starts ...
      {'B', 0, 0, 0, C},  // ... under attention + router backward
  };
  expected.insert(expected.end(), combined.begin(), combined.end());
  const std::vector<Call> last = alone('B', 1, moe);
  expected.insert(expected.end(), last.begin(), last.end());
  BOOST_TEST(calls == expected, boost::test_tools::per_element());
}

// Split weight gradients fill the slots where nothing else is ready to compute (here, while
// backward(1)'s dispatch is in flight alone) and all of a microbatch's are done before the next
// microbatch's backward starts.
BOOST_AUTO_TEST_CASE(split_weight_gradients_fill_gaps_and_finish_with_their_pair) {
  const std::vector<bool> dense{C};
  const std::vector<bool> moe{C, M, C, M};
  RuleKeepingEngine engine({dense, moe, dense});
  const std::vector<Call> calls = run(engine, 2, true);
  // Backward(1) alone: the head; the combine's backward (comm) with the head's W filling its
  // slot; the experts' backward; the dispatch's backward (comm) with no W due yet; the MoE
  // unit's first stage and the embedding; their W, due only after their last stage, at the end.
  const std::vector<Call> tail(calls.end() - 9, calls.end());
  const std::vector<Call> expected_tail{
      {'B', 1, 2, 0, C}, {'B', 1, 1, 3, M}, {'W', 1, 2, 0, C}, {'B', 1, 1, 2, C}, {'B', 1, 1, 1, M},
      {'B', 1, 1, 0, C}, {'B', 1, 0, 0, C}, {'W', 1, 1, 0, C}, {'W', 1, 0, 0, C},
  };
  BOOST_TEST(tail == expected_tail, boost::test_tools::per_element());
  // Microbatch 0's weight gradients all come before microbatch 1's first backward call.
  const auto first_b1 = std::find_if(calls.begin(), calls.end(), [](const Call& c) { return c.what == 'B' && c.mb == 1; });
  const auto w0 = std::count_if(calls.begin(), first_b1, [](const Call& c) { return c.what == 'W' && c.mb == 0; });
  BOOST_TEST(w0 == 3);
}

// For every shape, microbatch count and weight-gradient split: the order is legal, at most two
// microbatches are in flight, the backward of microbatch i-1 completes before that of i starts
// (so every gradient accumulates microbatches 0, 1, ... in order, as the sequential scheduler
// does), forward(i) and backward(i-1) really interleave, and a comm stage issued while the other
// microbatch still has work is followed by that work, never by its own microbatch's next stage.
BOOST_AUTO_TEST_CASE(order_rules_and_interleaving_hold_for_every_shape) {
  for (std::size_t shape = 0; shape < kShapes.size(); ++shape) {
    for (const uint32_t microbatches : {2u, 3u, 5u}) {
      for (const bool split : {false, true}) {
        BOOST_TEST_CONTEXT("shape " << shape << ", " << microbatches << " microbatches, split " << split) {
          RuleKeepingEngine engine(kShapes[shape]);
          const std::vector<Call> calls = run(engine, microbatches, split);

          // Accumulation order: per unit, the microbatches of its gradient-writing calls ascend.
          std::map<uint32_t, std::vector<uint32_t>> writers;
          for (const Call& c : calls)
            if ((split ? c.what == 'W' : c.what == 'B' && c.stage == 0)) writers[c.unit].push_back(c.mb);
          for (const auto& [unit, mbs] : writers) {
            BOOST_TEST(std::is_sorted(mbs.begin(), mbs.end()), "unit " << unit << " accumulates in order");
            BOOST_TEST(mbs.size() == microbatches);
          }

          for (uint32_t i = 1; i < microbatches; ++i) {
            auto first = [&](char what, uint32_t mb) {
              return std::find_if(calls.begin(), calls.end(), [&](const Call& c) { return c.what == what && c.mb == mb; }) - calls.begin();
            };
            auto last = [&](char what, uint32_t mb) {
              return calls.rend() - std::find_if(calls.rbegin(), calls.rend(), [&](const Call& c) { return c.what == what && c.mb == mb; }) - 1;
            };
            // Interleaved: forward(i) starts before backward(i-1) ends and ends after it starts.
            BOOST_TEST(first('F', i) < last('B', i - 1));
            BOOST_TEST(last('F', i) > first('B', i - 1));
            // Two in flight at most: forward(i) starts after backward(i-2) ended.
            if (i >= 2) BOOST_TEST(first('F', i) > last('B', i - 2));
            // Backward(i-1) ends before backward(i) starts.
            BOOST_TEST(last('B', i - 1) < first('B', i));
          }

          // A comm stage is followed by the other microbatch's work while that has any left.
          for (std::size_t k = 0; k + 1 < calls.size(); ++k) {
            const Call& c = calls[k];
            if (c.what == 'W' || !engine.is_comm(c.unit, c.stage)) continue;
            const uint32_t other = c.what == 'F' ? c.mb - 1 : c.mb + 1;
            const bool paired = c.what == 'F' ? c.mb >= 1 : c.mb + 1 < microbatches;
            if (!paired) continue;
            const char other_pass = c.what == 'F' ? 'B' : 'F';
            const bool other_has_work =
                std::any_of(calls.begin() + static_cast<std::ptrdiff_t>(k) + 1, calls.end(),
                            [&](const Call& d) { return d.what == other_pass && d.mb == other; });
            const Call& next = calls[k + 1];
            if (other_has_work)
              BOOST_TEST(!(next.mb == c.mb && next.what == c.what && !engine.is_comm(next.unit, next.stage)),
                         c << " is followed by its own microbatch's compute " << next);
          }
        }
      }
    }
  }
}

// The engine offers the split, the scheduler takes it (before any backward), and every unit of
// every microbatch gets its weight gradients (run() checks both).
BOOST_AUTO_TEST_CASE(asks_for_split_weight_gradients_when_offered) {
  RuleKeepingEngine engine({{C}, {C, M, C, M}, {C}});
  const std::vector<Call> calls = run(engine, 3, true);
  BOOST_TEST(engine.split_asked());
  BOOST_TEST(std::count_if(calls.begin(), calls.end(), [](const Call& c) { return c.what == 'W'; }) == 9);
}

BOOST_AUTO_TEST_SUITE_END()

// "delay_weight_gradients": false: the scheduler declines the split the engine offers, so backward
// computes the weight gradients, and the order is the one without a split.
BOOST_AUTO_TEST_CASE(delay_weight_gradients_false_declines_the_split) {
  boost::json::object options;
  options["delay_weight_gradients"] = false;
  Scheduler declining(options);
  Scheduler plain;
  const std::vector<std::vector<bool>> units{{C}, {C, M, C, M}, {C}};
  RuleKeepingEngine offered(units);
  const std::vector<Call> calls = declining.run(offered, 3, true);
  BOOST_TEST(!offered.split_asked());
  RuleKeepingEngine not_offered(units);
  const std::vector<Call> expected = plain.run(not_offered, 3, false);
  BOOST_TEST(calls == expected, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_SUITE(combined_1f1b_refusals, Scheduler)

BOOST_AUTO_TEST_CASE(refuses_one_microbatch_saying_why) {
  RuleKeepingEngine engine({{C}, {C, M, C, M}, {C}});
  try {
    scheduler->run_step(engine.env(1, false));
    BOOST_FAIL("run_step accepted one microbatch");
  } catch (const plexus::ComponentCallError& e) {
    const std::string text = e.what();
    BOOST_TEST_MESSAGE("refused as expected: " << text);
    BOOST_TEST(e.status() == PLX_ERR_INVALID_ARGUMENT);
    BOOST_TEST(text.find("train.microbatches >= 2") != std::string::npos);
    BOOST_TEST(text.find("\"sequential\"") != std::string::npos);
  }
  BOOST_TEST(engine.calls.empty());
}

BOOST_AUTO_TEST_CASE(refuses_a_model_without_comm_stages_saying_to_use_sequential) {
  RuleKeepingEngine engine({{C}, {C, C, C}, {C}});  // e.g. moe.layer with ep = 1
  try {
    scheduler->run_step(engine.env(4, false));
    BOOST_FAIL("run_step accepted a model with nothing to overlap");
  } catch (const plexus::ComponentCallError& e) {
    const std::string text = e.what();
    BOOST_TEST_MESSAGE("refused as expected: " << text);
    BOOST_TEST(e.status() == PLX_ERR_INVALID_ARGUMENT);
    BOOST_TEST(text.find("ep > 1") != std::string::npos);
    BOOST_TEST(text.find("use scheduler.component \"sequential\"") != std::string::npos);
  }
  BOOST_TEST(engine.calls.empty());
}

BOOST_AUTO_TEST_CASE(stops_at_the_first_failing_callback) {
  RuleKeepingEngine engine({{C}, {C, M, C, M}, {C}});
  engine.fail_call = 9;  // inside the first combined pair
  try {
    scheduler->run_step(engine.env(3, true));
    BOOST_FAIL("run_step ignored a failed callback");
  } catch (const plexus::ComponentCallError& e) {
    BOOST_TEST(e.status() == PLX_ERR_COMM);
  }
  BOOST_TEST(engine.calls.size() == 10u);
}

BOOST_AUTO_TEST_SUITE_END()

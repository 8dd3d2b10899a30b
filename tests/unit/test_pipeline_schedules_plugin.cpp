#define BOOST_TEST_MODULE unit_pipeline_schedules_plugin
#include <boost/json/object.hpp>
#include <boost/test/unit_test.hpp>

// The pipeline_schedules plugin (the real built library, through its C table) drives a recording
// stand-in for the engine's plx_schedule_env (ABI 1.7). The stand-in enforces what the engine
// enforces, per microbatch and chunk (a Model::Run): a chunk's forward stages in order, its
// backward after its forward and in reverse; its input received (recv_forward posted) before the
// forward of its first unit and its output's gradient (recv_backward) before the backward of its
// last unit; a send only after the computation that produces it; no transfer without a peer
// (the embedding's and the head's chunks); split weight gradients after their unit's backward.
// Every call is recorded, so the tests check both that the order is legal and that it is the
// plan's (schedule_plan.hpp), and, without pipelining, that it is the very order of the
// sequential and combined_1f1b schedulers.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/errors.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/plexus.h"
#include "schedule_plan.hpp"

namespace {

namespace fs = std::filesystem;
namespace ps = plexus::pipeline_schedules;
using ps::Op;
using ps::OpKind;

// One recorded env call. Stage calls: F (forward), B (backward), W (weight gradients) with the
// unit and stage; transfers: their OpKind name with the chunk in `unit`.
struct Call {
  std::string what;
  uint32_t mb = 0, unit = 0, stage = 0;
  bool comm_stream = false;
  bool operator==(const Call&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Call& c) {
  if (c.what == "F" || c.what == "B" || c.what == "W")
    return os << c.what << "(mb " << c.mb << ", unit " << c.unit << ", stage " << c.stage
              << (c.comm_stream ? ", comm)" : ")");
  return os << c.what << "(mb " << c.mb << ", chunk " << c.unit << ")";
}

constexpr bool C = false;  // a compute stage
constexpr bool M = true;   // a communication stage

// The pipeline as one rank sees it: its place, its units' stage kinds, its chunks' unit counts.
struct RankShape {
  uint32_t pipeline_size = 1;
  uint32_t pipeline_rank = 0;
  std::vector<std::vector<bool>> units;
  std::vector<uint32_t> chunk_sizes;  // units per chunk, in order; empty: one chunk of all
};

class PipelineEngine {
 public:
  std::vector<Call> calls;
  std::vector<std::string> violations;
  int64_t fail_call = -1;  // this call (0-based) returns PLX_ERR_COMM

  explicit PipelineEngine(RankShape shape) : shape_(std::move(shape)) {
    if (shape_.chunk_sizes.empty()) shape_.chunk_sizes = {static_cast<uint32_t>(shape_.units.size())};
    uint32_t first = 0;
    for (const uint32_t n : shape_.chunk_sizes) {
      chunks_.emplace_back(first, n);
      for (uint32_t u = 0; u < n; ++u) chunk_of_.push_back(static_cast<uint32_t>(chunks_.size() - 1));
      first += n;
    }
  }

  // `host_minor` 6: a host before 1.7 (the env ends before num_chunks).
  plx_schedule_env env(uint32_t microbatches, bool offer_split, uint32_t host_minor = 7) {
    microbatches_ = microbatches;
    runs_.clear();
    transfers_.clear();
    weights_done_.clear();
    split_ = false;
    plx_schedule_env e{};
    e.struct_size =
        host_minor >= 7 ? sizeof(e) : static_cast<uint32_t>(offsetof(plx_schedule_env, num_chunks));
    e.num_microbatches = microbatches;
    e.num_units = static_cast<uint32_t>(shape_.units.size());
    e.ctx = this;
    e.compute_stream = reinterpret_cast<plx_stream>(&compute_tag_);
    e.comm_stream = reinterpret_cast<plx_stream>(&comm_tag_);
    e.unit_num_stages = &num_stages;
    e.unit_stage = &stage_info;
    e.forward = &forward;
    e.backward = &backward;
    e.backward_weights = offer_split ? &backward_weights : nullptr;
    e.split_weight_gradients = offer_split ? &split_weight_gradients : nullptr;
    e.num_chunks = static_cast<uint32_t>(chunks_.size());
    e.pipeline_rank = shape_.pipeline_rank;
    e.pipeline_size = shape_.pipeline_size;
    e.chunk_units = &chunk_units;
    e.send_forward = &send_forward;
    e.recv_forward = &recv_forward;
    e.send_backward = &send_backward;
    e.recv_backward = &recv_backward;
    return e;
  }

  uint32_t chunk_of(uint32_t unit) const { return chunk_of_.at(unit); }
  uint32_t num_chunks() const { return static_cast<uint32_t>(chunks_.size()); }
  std::pair<uint32_t, uint32_t> chunk(uint32_t c) const { return chunks_.at(c); }
  bool is_comm(uint32_t unit, uint32_t stage) const { return shape_.units[unit][stage]; }
  bool split_asked() const { return split_; }
  bool first_chunk(uint32_t c) const { return c * shape_.pipeline_size + shape_.pipeline_rank == 0; }
  bool last_chunk(uint32_t c) const {
    return c * shape_.pipeline_size + shape_.pipeline_rank == num_chunks() * shape_.pipeline_size - 1;
  }
  // Corrupts chunk_units' answer for chunk 1 (a gap after chunk 0), to test the check.
  bool report_gap = false;

  // Every (microbatch, chunk) ran forward and backward (and weight gradients when split), and
  // every transfer with a peer was made.
  std::vector<std::string> incomplete() const {
    std::vector<std::string> missing;
    for (uint32_t mb = 0; mb < microbatches_; ++mb)
      for (uint32_t c = 0; c < num_chunks(); ++c) {
        const auto it = runs_.find({mb, c});
        std::ostringstream where;
        where << "mb " << mb << ", chunk " << c;
        if (it == runs_.end() || !it->second.forward_done || !it->second.backward_done)
          missing.push_back("the forward and backward of " + where.str());
        for (const auto& [kind, needed] : {std::pair{OpKind::recv_forward, !first_chunk(c)},
                                           std::pair{OpKind::send_backward, !first_chunk(c)},
                                           std::pair{OpKind::send_forward, !last_chunk(c)},
                                           std::pair{OpKind::recv_backward, !last_chunk(c)}})
          if (needed && transfers_.count({kind, mb, c}) == 0)
            missing.push_back(std::string(ps::to_string(kind)) + " of " + where.str());
        if (split_)
          for (uint32_t u = chunks_[c].first; u < chunks_[c].first + chunks_[c].second; ++u)
            if (weights_done_.count({mb, u}) == 0)
              missing.push_back("weight gradients of unit " + std::to_string(u));
      }
    return missing;
  }

 private:
  // One microbatch through one chunk, as the engine's Model::Run tracks it.
  struct Run {
    uint32_t forward_unit = 0, forward_stage = 0;  // the next forward stage (unit within the rank)
    bool forward_started = false, forward_done = false;
    int64_t backward_unit = -1;
    uint32_t backward_stage = 0;
    bool backward_started = false, backward_done = false;
  };
  RankShape shape_;
  std::vector<std::pair<uint32_t, uint32_t>> chunks_;
  std::vector<uint32_t> chunk_of_;
  uint32_t microbatches_ = 0;
  std::map<std::pair<uint32_t, uint32_t>, Run> runs_;
  std::set<std::tuple<OpKind, uint32_t, uint32_t>> transfers_;
  std::set<std::pair<uint32_t, uint32_t>> weights_done_;
  bool split_ = false;
  char compute_tag_ = 0;
  char comm_tag_ = 0;

  static PipelineEngine& self(void* ctx) { return *static_cast<PipelineEngine*>(ctx); }

  void violated(const Call& c, const std::string& why) {
    std::ostringstream text;
    text << c << ": " << why;
    violations.push_back(text.str());
  }
  plx_status record(const Call& c) {
    calls.push_back(c);
    return static_cast<int64_t>(calls.size()) - 1 == fail_call ? PLX_ERR_COMM : PLX_OK;
  }
  Run& run_of(uint32_t mb, uint32_t unit) {
    const uint32_t c = chunk_of(unit);
    auto [it, fresh] = runs_.try_emplace({mb, c});
    if (fresh) it->second.forward_unit = chunks_[c].first;
    return it->second;
  }
  bool posted(OpKind kind, uint32_t mb, uint32_t c) const { return transfers_.count({kind, mb, c}) == 1; }

  static plx_status num_stages(void* ctx, uint32_t unit, uint32_t* out) noexcept {
    if (unit >= self(ctx).shape_.units.size()) return PLX_ERR_INVALID_ARGUMENT;
    *out = static_cast<uint32_t>(self(ctx).shape_.units[unit].size());
    return PLX_OK;
  }
  static plx_status stage_info(void* ctx, uint32_t unit, uint32_t stage, plx_stage_info* out) noexcept {
    const auto& units = self(ctx).shape_.units;
    if (unit >= units.size() || stage >= units[unit].size()) return PLX_ERR_INVALID_ARGUMENT;
    out->kind = units[unit][stage] ? PLX_STAGE_COMM : PLX_STAGE_COMPUTE;
    out->name = units[unit][stage] ? "all_to_all" : "compute";
    return PLX_OK;
  }
  static plx_status chunk_units(void* ctx, uint32_t c, uint32_t* first, uint32_t* count) noexcept {
    PipelineEngine& e = self(ctx);
    if (c >= e.chunks_.size()) return PLX_ERR_INVALID_ARGUMENT;
    *first = e.chunks_[c].first + (e.report_gap && c == 1 ? 1 : 0);
    *count = e.chunks_[c].second;
    return PLX_OK;
  }
  plx_status stage_call(char what, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream stream) {
    const Call c{std::string(1, what), mb, unit, stage, stream == reinterpret_cast<plx_stream>(&comm_tag_)};
    if (mb >= microbatches_ || unit >= shape_.units.size() || stage >= shape_.units[unit].size()) {
      violated(c, "out of range");
      return record(c);
    }
    if (c.comm_stream != shape_.units[unit][stage]) violated(c, "on the wrong stream");
    const uint32_t ch = chunk_of(unit);
    const auto [first, count] = chunks_[ch];
    Run& run = run_of(mb, unit);
    if (what == 'F') {
      if (run.forward_done || unit != run.forward_unit || stage != run.forward_stage) {
        violated(c, "forward out of order");
      } else {
        // The forward of the chunk's first unit waits for the chunk's input.
        if (!run.forward_started && !first_chunk(ch) && !posted(OpKind::recv_forward, mb, ch))
          violated(c, "the chunk's forward starts before its input's receive was posted");
        run.forward_started = true;
        if (++run.forward_stage == shape_.units[unit].size()) {
          run.forward_stage = 0;
          if (++run.forward_unit == first + count) {
            run.forward_done = true;
            run.backward_unit = first + count - 1;
            run.backward_stage = static_cast<uint32_t>(shape_.units[first + count - 1].size()) - 1;
          }
        }
      }
    } else {
      if (!run.forward_done || run.backward_done || static_cast<int64_t>(unit) != run.backward_unit ||
          stage != run.backward_stage) {
        violated(c, "backward out of order");
      } else {
        // The backward of the chunk's last unit waits for its output's gradient.
        if (!run.backward_started && !last_chunk(ch) && !posted(OpKind::recv_backward, mb, ch))
          violated(c, "the chunk's backward starts before its output gradient's receive was posted");
        run.backward_started = true;
        if (stage > 0) {
          --run.backward_stage;
        } else if (unit == first) {
          run.backward_done = true;
        } else {
          --run.backward_unit;
          run.backward_stage = static_cast<uint32_t>(shape_.units[unit - 1].size()) - 1;
        }
      }
    }
    return record(c);
  }
  static plx_status forward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage,
                            plx_stream stream) noexcept {
    return self(ctx).stage_call('F', mb, unit, stage, stream);
  }
  static plx_status backward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage,
                             plx_stream stream) noexcept {
    return self(ctx).stage_call('B', mb, unit, stage, stream);
  }
  static plx_status split_weight_gradients(void* ctx) noexcept {
    PipelineEngine& e = self(ctx);
    if (std::any_of(e.calls.begin(), e.calls.end(), [](const Call& c) { return c.what == "B"; }))
      e.violations.push_back("split_weight_gradients after the step's first backward call");
    e.split_ = true;
    return PLX_OK;
  }
  static plx_status backward_weights(void* ctx, uint32_t mb, uint32_t unit, plx_stream stream) noexcept {
    PipelineEngine& e = self(ctx);
    const Call c{"W", mb, unit, 0, stream == reinterpret_cast<plx_stream>(&e.comm_tag_)};
    if (!e.split_) {
      e.violated(c, "weight gradients without asking for them apart");
    } else {
      const Run& run = e.run_of(mb, unit);
      // Allowed once the unit's backward ran (its stage 0): the run has moved past it.
      const bool past =
          run.backward_done || (run.backward_started && run.backward_unit < static_cast<int64_t>(unit));
      if (!past || !e.weights_done_.insert({mb, unit}).second)
        e.violated(c, "weight gradients before the unit's backward, or twice");
      if (c.comm_stream) e.violated(c, "weight gradients on the communication stream");
    }
    return e.record(c);
  }
  plx_status transfer(OpKind kind, uint32_t mb, uint32_t ch) {
    const Call c{ps::to_string(kind), mb, ch, 0, false};
    if (mb >= microbatches_ || ch >= chunks_.size()) {
      violated(c, "out of range");
      calls.push_back(c);
      return PLX_ERR_INVALID_ARGUMENT;
    }
    // The env refuses a transfer without a peer (and so does this stand-in, loudly).
    const bool no_peer =
        ((kind == OpKind::recv_forward || kind == OpKind::send_backward) && first_chunk(ch)) ||
        ((kind == OpKind::send_forward || kind == OpKind::recv_backward) && last_chunk(ch));
    if (no_peer) {
      violated(c, "a transfer without a peer");
      calls.push_back(c);
      return PLX_ERR_INVALID_ARGUMENT;
    }
    const auto it = runs_.find({mb, ch});
    if (kind == OpKind::send_forward && (it == runs_.end() || !it->second.forward_done))
      violated(c, "sent before the chunk's forward completed");
    if (kind == OpKind::send_backward && (it == runs_.end() || !it->second.backward_done))
      violated(c, "sent before the chunk's backward completed");
    if (!transfers_.insert({kind, mb, ch}).second) violated(c, "twice");
    return record(c);
  }
  static plx_status send_forward(void* ctx, uint32_t mb, uint32_t ch) noexcept {
    return self(ctx).transfer(OpKind::send_forward, mb, ch);
  }
  static plx_status recv_forward(void* ctx, uint32_t mb, uint32_t ch) noexcept {
    return self(ctx).transfer(OpKind::recv_forward, mb, ch);
  }
  static plx_status send_backward(void* ctx, uint32_t mb, uint32_t ch) noexcept {
    return self(ctx).transfer(OpKind::send_backward, mb, ch);
  }
  static plx_status recv_backward(void* ctx, uint32_t mb, uint32_t ch) noexcept {
    return self(ctx).transfer(OpKind::recv_backward, mb, ch);
  }
};

fs::path plugin_file(const std::string& plugin) {
  return fs::path(std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins/libplexus_" + plugin + ".so");
}

// One scheduler component of a built plugin, created with `options`.
struct Scheduler {
  plexus::PluginHost host;
  plexus::ConfigHandle config;
  std::unique_ptr<plexus::SchedulerInstance> scheduler;
  Scheduler(const std::string& plugin, const std::string& component, boost::json::object options = {})
      : config(std::move(options), "scheduler.options") {
    if (!fs::exists(plugin_file(plugin)))
      throw std::runtime_error("the " + plugin + " plugin is not built: " + plugin_file(plugin).string() +
                               " is missing");
    host.load(plugin_file(plugin));
    scheduler =
        std::make_unique<plexus::SchedulerInstance>(host.get(PLX_KIND_SCHEDULER, component), config.get());
  }
  // Runs one step; the stand-in's rules must hold and every run and transfer complete.
  std::vector<Call> run(PipelineEngine& engine, uint32_t microbatches, bool offer_split = false,
                        uint32_t host_minor = 7) {
    scheduler->run_step(engine.env(microbatches, offer_split, host_minor));
    BOOST_TEST(engine.violations.empty(), "the engine's order rules hold");
    for (const std::string& v : engine.violations) BOOST_TEST_MESSAGE("violation: " << v);
    const std::vector<std::string> missing = engine.incomplete();
    BOOST_TEST(missing.empty(), "every run and transfer completed");
    for (const std::string& m : missing) BOOST_TEST_MESSAGE("missing: " << m);
    return engine.calls;
  }
};

Scheduler pipeline(const std::string& component, boost::json::object options = {}) {
  return Scheduler("pipeline_schedules", component, std::move(options));
}

// The recorded calls as plan operations: each chunk's forward or backward where its first stage
// call is, transfers where they are; weight gradients dropped. Exact for schedules whose chains
// run one after the other (no overlap).
std::vector<Op> as_ops(const PipelineEngine& engine, const std::vector<Call>& calls) {
  std::vector<Op> ops;
  std::set<std::tuple<std::string, uint32_t, uint32_t>> seen;
  for (const Call& c : calls) {
    if (c.what == "W") continue;
    if (c.what == "F" || c.what == "B") {
      const uint32_t ch = engine.chunk_of(c.unit);
      if (seen.insert({c.what, c.mb, ch}).second)
        ops.push_back({c.what == "F" ? OpKind::forward : OpKind::backward, c.mb, ch});
      continue;
    }
    for (const OpKind k :
         {OpKind::recv_forward, OpKind::send_forward, OpKind::recv_backward, OpKind::send_backward})
      if (c.what == ps::to_string(k)) ops.push_back({k, c.mb, c.unit});
  }
  return ops;
}

// Unit shapes: Megatron's MoE layer (attention + router | dispatch | experts | combine) between
// dense units, and a unit that starts with a communication stage.
const std::vector<std::vector<bool>> kMoeModel = {{C}, {C, M, C, M}, {C}, {C, M, C, M}, {C}, {C}};
const std::vector<std::vector<bool>> kOddModel = {{C}, {M, C}, {C, M, M, C}, {C}};

std::string refusal(Scheduler& s, PipelineEngine& engine, uint32_t microbatches) {
  try {
    s.scheduler->run_step(engine.env(microbatches, false));
  } catch (const plexus::ComponentCallError& e) {
    BOOST_TEST(e.status() == PLX_ERR_INVALID_ARGUMENT);
    BOOST_TEST_MESSAGE("refused as expected: " << e.what());
    BOOST_TEST(engine.calls.empty(), "nothing ran before the refusal");
    return e.what();
  }
  BOOST_FAIL("run_step accepted the shape");
  return {};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(without_pipelining)

// At pp 1 both components make exactly the sequential scheduler's calls (gradient accumulation),
// on a host with the pipeline fields and on one before 1.7, so a config moves between pipeline
// sizes unchanged.
BOOST_AUTO_TEST_CASE(equal_to_the_sequential_scheduler) {
  Scheduler sequential("sequential_scheduler", "sequential");
  for (const auto& model : {kMoeModel, kOddModel})
    for (const uint32_t mbs : {1u, 2u, 5u}) {
      PipelineEngine reference({1, 0, model, {}});
      const std::vector<Call> expected = sequential.run(reference, mbs);
      for (const char* component : {"1f1b", "interleaved_1f1b"})
        for (const uint32_t minor : {7u, 6u}) {
          BOOST_TEST_CONTEXT(component << ", " << mbs << " microbatches, host 1." << minor) {
            Scheduler s = pipeline(component);
            PipelineEngine engine({1, 0, model, {}});
            BOOST_TEST(s.run(engine, mbs, true, minor) == expected, boost::test_tools::per_element());
            BOOST_TEST(!engine.split_asked(), "no overlap, no split weight gradients");
          }
        }
    }
}

// With overlap_moe_expert_parallel_comm at pp 1 both components make exactly combined_1f1b's calls
// (Megatron's no-pipelining combined 1F1B), with and without split weight gradients.
BOOST_AUTO_TEST_CASE(equal_to_combined_1f1b_with_the_overlap) {
  for (const bool delay : {true, false}) {
    boost::json::object options;
    options["delay_weight_gradients"] = delay;
    Scheduler combined("combined_1f1b", "combined_1f1b", options);
    options["overlap_moe_expert_parallel_comm"] = true;
    for (const auto& model : {kMoeModel, kOddModel})
      for (const uint32_t mbs : {2u, 3u, 5u})
        for (const bool offer : {true, false}) {
          PipelineEngine reference({1, 0, model, {}});
          const std::vector<Call> expected = combined.run(reference, mbs, offer);
          for (const char* component : {"1f1b", "interleaved_1f1b"}) {
            BOOST_TEST_CONTEXT(component << ", " << mbs << " microbatches, delay " << delay << ", offered "
                                         << offer) {
              Scheduler s = pipeline(component, options);
              PipelineEngine engine({1, 0, model, {}});
              BOOST_TEST(s.run(engine, mbs, offer) == expected, boost::test_tools::per_element());
              BOOST_TEST(engine.split_asked() == (delay && offer));
            }
          }
        }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(one_f_one_b)

// Two stages, three microbatches, written out: rank 0 (the embedding) warms up with one forward;
// rank 1 (the head) has no warmup. Receives are posted one computation ahead, sends follow their
// computation.
BOOST_AUTO_TEST_CASE(two_stages_written_out) {
  const std::vector<std::vector<bool>> model{{C}, {C}};
  auto F = [](uint32_t mb) { return Op{OpKind::forward, mb, 0}; };
  auto B = [](uint32_t mb) { return Op{OpKind::backward, mb, 0}; };
  auto T = [](OpKind k, uint32_t mb) { return Op{k, mb, 0}; };
  const OpKind sf = OpKind::send_forward, rf = OpKind::recv_forward, sb = OpKind::send_backward,
               rb = OpKind::recv_backward;
  const std::vector<Op> rank0{F(0),     T(sf, 0), T(rb, 0), F(1),     T(sf, 1), B(0),
                              T(rb, 1), F(2),     T(sf, 2), T(rb, 2), B(1),     B(2)};
  const std::vector<Op> rank1{T(rf, 0), F(0), T(rf, 1), B(0), T(sb, 0), F(1),
                              T(rf, 2), B(1), T(sb, 1), F(2), B(2),     T(sb, 2)};
  for (uint32_t r = 0; r < 2; ++r) {
    Scheduler s = pipeline("1f1b");
    PipelineEngine engine({2, r, model, {}});
    const std::vector<Call> calls = s.run(engine, 3);
    BOOST_TEST(as_ops(engine, calls) == (r == 0 ? rank0 : rank1), boost::test_tools::per_element());
    BOOST_TEST(ps::one_f_one_b(2, r, 3) == (r == 0 ? rank0 : rank1), boost::test_tools::per_element());
  }
}

// Every rank of several pipelines: the calls are the plan's, stage by stage, and legal.
BOOST_AUTO_TEST_CASE(calls_follow_the_plan_on_every_rank) {
  for (uint32_t P = 2; P <= 4; ++P)
    for (uint32_t r = 0; r < P; ++r)
      for (const uint32_t mbs : {1u, 3u, 6u}) {
        BOOST_TEST_CONTEXT("pp " << P << ", rank " << r << ", " << mbs << " microbatches") {
          Scheduler s = pipeline("1f1b");
          PipelineEngine engine({P, r, kMoeModel, {}});
          const std::vector<Call> calls = s.run(engine, mbs);
          BOOST_TEST(as_ops(engine, calls) == ps::one_f_one_b(P, r, mbs), boost::test_tools::per_element());
        }
      }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(interleaved)

// Two virtual stages of three units each on every rank: the calls are the plan's, and legal
// (each chunk's units, the ring's transfers named by chunk).
BOOST_AUTO_TEST_CASE(calls_follow_the_plan_on_every_rank) {
  const std::vector<std::vector<bool>> model{{C}, {C, M, C, M}, {C}, {C}, {C, M, C, M}, {C}};
  for (const uint32_t P : {2u, 3u})
    for (uint32_t r = 0; r < P; ++r)
      for (const uint32_t mbs : {P, 2 * P, 2 * P + 1})
        for (const std::optional<uint32_t> n : {std::optional<uint32_t>{}, std::optional<uint32_t>{mbs}}) {
          if (!n && mbs % P != 0) continue;  // N = P leaves a last group shorter than P: refused
          BOOST_TEST_CONTEXT("pp " << P << ", rank " << r << ", " << mbs << " microbatches, N "
                                   << (n ? std::to_string(*n) : "default")) {
            boost::json::object options;
            if (n) options["microbatch_group_size_per_vp_stage"] = *n;
            Scheduler s = pipeline("interleaved_1f1b", options);
            PipelineEngine engine({P, r, model, {3, 3}});
            const std::vector<Call> calls = s.run(engine, mbs);
            ps::Shape shape{P, r, mbs, 2, n, false};
            BOOST_TEST(as_ops(engine, calls) == ps::plan(ps::Schedule::interleaved, shape),
                       boost::test_tools::per_element());
          }
        }
}

// With the overlap and pipelining: each steady pair of two virtual microbatches (possibly on
// different chunks) runs merged by the slot planner, legal for the engine; every stage call
// belongs to the plan's step at that point (steps never overlap); the transfers are the plan's;
// and each send starts right after the last stage of its chain, before the other chain finishes.
BOOST_AUTO_TEST_CASE(combined_pairs_with_pipelining) {
  for (const bool offer : {false, true})
    for (uint32_t r = 0; r < 2; ++r)
      for (const uint32_t mbs : {2u, 4u, 6u}) {
        BOOST_TEST_CONTEXT("rank " << r << ", " << mbs << " microbatches, split offered " << offer) {
          boost::json::object options;
          options["overlap_moe_expert_parallel_comm"] = true;
          Scheduler s = pipeline("interleaved_1f1b", options);
          PipelineEngine engine({2, r, kMoeModel, {3, 3}});
          const std::vector<Call> calls = s.run(engine, mbs, offer);
          BOOST_TEST(engine.split_asked() == offer);
          const std::vector<Op> plan =
              ps::plan(ps::Schedule::interleaved, {2, r, mbs, 2, std::nullopt, true});

          // The plan's computation steps, and for each (pass, mb, chunk) its step.
          std::map<std::tuple<char, uint32_t, uint32_t>, std::size_t> step_of;
          std::size_t steps = 0, pairs = 0;
          for (std::size_t i = 0; i < plan.size(); ++i) {
            const Op& op = plan[i];
            if (op.kind != OpKind::forward && op.kind != OpKind::backward) continue;
            if (!(op.kind == OpKind::backward && op.combined)) ++steps;
            if (op.kind == OpKind::forward && op.combined) ++pairs;
            step_of[{op.kind == OpKind::forward ? 'F' : 'B', op.microbatch, op.chunk}] = steps - 1;
          }
          BOOST_TEST(pairs == ps::interleaved_counts(2, r, mbs, 2, 2, true).steady);
          std::size_t current = 0;
          for (const Call& c : calls) {
            if (c.what != "F" && c.what != "B" && c.what != "W") continue;
            const char pass = c.what == "W" ? 'B' : c.what[0];
            const std::size_t step = step_of.at({pass, c.mb, engine.chunk_of(c.unit)});
            BOOST_TEST(step >= current, c << " runs after a later step began");
            current = std::max(current, step);
          }

          // The same transfers as the plan, and each send right after its chain's last stage.
          std::multiset<std::tuple<int, uint32_t, uint32_t>> planned, made;
          for (const Op& op : plan)
            if (op.kind != OpKind::forward && op.kind != OpKind::backward)
              planned.insert({static_cast<int>(op.kind), op.microbatch, op.chunk});
          for (std::size_t i = 0; i < calls.size(); ++i) {
            const Call& c = calls[i];
            const bool sf = c.what == "send_forward", sb = c.what == "send_backward";
            if (c.what == "F" || c.what == "B" || c.what == "W") continue;
            for (const OpKind k :
                 {OpKind::recv_forward, OpKind::send_forward, OpKind::recv_backward, OpKind::send_backward})
              if (c.what == ps::to_string(k)) made.insert({static_cast<int>(k), c.mb, c.unit});
            if (!sf && !sb) continue;
            BOOST_TEST_REQUIRE(i > 0u);
            const Call& before = calls[i - 1];
            const auto [first, count] = engine.chunk(c.unit);
            if (sf) {
              const Call last{"F", c.mb, first + count - 1,
                              static_cast<uint32_t>(kMoeModel[first + count - 1].size()) - 1,
                              kMoeModel[first + count - 1].back()};
              BOOST_TEST(before == last, c << " follows " << before);
            } else {
              const Call last{"B", c.mb, first, 0, kMoeModel[first][0]};
              BOOST_TEST(before == last, c << " follows " << before);
            }
          }
          BOOST_TEST((planned == made));
        }
      }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(refusals)

BOOST_AUTO_TEST_CASE(one_f_one_b_with_virtual_stages) {
  Scheduler s = pipeline("1f1b");
  PipelineEngine engine({2, 0, kMoeModel, {3, 3}});
  const std::string text = refusal(s, engine, 4);
  BOOST_TEST(has(text, "scheduler \"1f1b\""));
  BOOST_TEST(has(text, "use scheduler.component \"interleaved_1f1b\""));
}

BOOST_AUTO_TEST_CASE(interleaved_with_fewer_microbatches_than_stages) {
  Scheduler s = pipeline("interleaved_1f1b");
  PipelineEngine engine({4, 1, kMoeModel, {3, 3}});
  const std::string text = refusal(s, engine, 3);
  BOOST_TEST(has(text, "should range in [PP=4, M=3]"));
}

BOOST_AUTO_TEST_CASE(interleaved_group_size_option) {
  boost::json::object options;
  options["microbatch_group_size_per_vp_stage"] = 5;
  Scheduler s = pipeline("interleaved_1f1b", options);
  PipelineEngine engine({2, 0, kMoeModel, {3, 3}});
  BOOST_TEST(has(refusal(s, engine, 4), "[PP=2, M=4], but microbatch_group_size_per_vp_stage is 5"));
  PipelineEngine seven({2, 0, kMoeModel, {3, 3}});
  BOOST_TEST(has(refusal(s, seven, 6), "but it is 1"));  // 6 % 5 = 1 < 2
}

BOOST_AUTO_TEST_CASE(overlap_with_pipelining_needs_virtual_stages) {
  boost::json::object options;
  options["overlap_moe_expert_parallel_comm"] = true;
  for (const char* component : {"1f1b", "interleaved_1f1b"}) {
    Scheduler s = pipeline(component, options);
    PipelineEngine engine({2, 1, kMoeModel, {}});
    const std::string text = refusal(s, engine, 4);
    BOOST_TEST(has(text, "overlap_moe_expert_parallel_comm"));
    BOOST_TEST(has(text, "virtual_stages >= 2"));
  }
}

BOOST_AUTO_TEST_CASE(chunks_that_do_not_cut_the_units) {
  Scheduler s = pipeline("interleaved_1f1b");
  PipelineEngine engine({2, 0, kMoeModel, {3, 3}});
  engine.report_gap = true;
  BOOST_TEST(has(refusal(s, engine, 4), "chunk 1 holding units [4, 7) of 6"));
}

BOOST_AUTO_TEST_CASE(pipelining_without_transfers) {
  Scheduler s = pipeline("1f1b");
  PipelineEngine engine({2, 0, kMoeModel, {}});
  plx_schedule_env env = engine.env(4, false);
  env.send_forward = nullptr;
  try {
    s.scheduler->run_step(env);
    BOOST_FAIL("run_step accepted an env without transfers");
  } catch (const plexus::ComponentCallError& e) {
    BOOST_TEST(has(e.what(), "offers no send_forward"));
  }
  BOOST_TEST(engine.calls.empty());
}

BOOST_AUTO_TEST_CASE(stops_at_the_first_failing_callback) {
  Scheduler s = pipeline("1f1b");
  PipelineEngine engine({3, 1, kMoeModel, {}});
  engine.fail_call = 11;
  try {
    s.scheduler->run_step(engine.env(4, false));
    BOOST_FAIL("run_step ignored a failed callback");
  } catch (const plexus::ComponentCallError& e) {
    BOOST_TEST(e.status() == PLX_ERR_COMM);
  }
  BOOST_TEST(engine.calls.size() == 12u);
}

BOOST_AUTO_TEST_SUITE_END()

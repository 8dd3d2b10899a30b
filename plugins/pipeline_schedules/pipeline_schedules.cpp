// The pipeline-parallel schedulers "1f1b" (Megatron-LM's non-interleaved 1F1B) and
// "interleaved_1f1b" (its interleaved 1F1B over virtual stages, optionally with the EP overlap's
// combined forward-backward steps).
//
// A step asks schedule_plan.hpp for this rank's operations, from the shape the engine reports in
// plx_schedule_env (ABI 1.7: pipeline_size, pipeline_rank, num_chunks, chunk_units), and walks
// them: a receive or send is one env call that only starts its transfer; the forward of
// (microbatch, chunk) is env.forward for each unit of the chunk and each of its stages in order,
// its backward env.backward in reverse. With the overlap a combined forward-backward pair is laid
// out stage by stage by the slot planner shared with combined_1f1b
// (plugins/common/schedule_overlap), and so is every lone forward or backward, so that without
// pipelining the order is exactly combined_1f1b's. On a host before 1.7 (no pipeline fields) the
// units are one chunk on rank 0 of 1: gradient accumulation.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plexus/cpp/plugin.hpp"
#include "plexus_schedule_overlap/overlap_plan.hpp"
#include "plexus_schedule_overlap/stage_chains.hpp"
#include "schedule_plan.hpp"

namespace {

namespace overlap = plexus::schedule_overlap;
namespace ps = plexus::pipeline_schedules;
using ps::Op;
using ps::OpKind;

// The engine's side of the pipeline for this rank: its place and its chunks' unit ranges.
struct Layout {
  uint32_t pipeline_size = 1;
  uint32_t pipeline_rank = 0;
  std::vector<std::pair<uint32_t, uint32_t>> chunks;  // per chunk: first unit, unit count
};

class PipelineScheduler {
 public:
  PipelineScheduler(plx_config config, ps::Schedule schedule) : schedule_(schedule) {
    const plexus::sdk::Host host = plexus::sdk::Host::current();
    overlap_ = host.config_bool_if(config, "overlap_moe_expert_parallel_comm").value_or(false);
    delay_weights_ = host.config_bool_if(config, "delay_weight_gradients").value_or(true);
    if (schedule == ps::Schedule::interleaved) {
      if (const std::optional<int64_t> n = host.config_int_if(config, "microbatch_group_size_per_vp_stage")) {
        if (*n < 1 || *n > std::numeric_limits<uint32_t>::max())
          throw plexus::sdk::Error(
              PLX_ERR_INVALID_ARGUMENT,
              "microbatch_group_size_per_vp_stage must be at least 1, got " + std::to_string(*n));
        group_size_ = static_cast<uint32_t>(*n);
      }
    }
  }

  void run_step(const plx_schedule_env& env) const {
    const Layout layout = read_layout(env);
    ps::Shape shape;
    shape.pipeline_size = layout.pipeline_size;
    shape.pipeline_rank = layout.pipeline_rank;
    shape.microbatches = env.num_microbatches;
    shape.num_chunks = static_cast<uint32_t>(layout.chunks.size());
    shape.group_size = group_size_;
    shape.overlap = overlap_;
    std::vector<Op> ops;
    try {
      ops = ps::plan(schedule_, shape);
    } catch (const ps::ScheduleError& e) {
      throw plexus::sdk::Error(PLX_ERR_INVALID_ARGUMENT, e.what());
    }
    // Everything is checked before the first call that does work, so a refusal leaves the step
    // untouched.
    if (layout.pipeline_size > 1) require_transfers(env);
    const overlap::StageKinds kinds = overlap::stage_kinds(env);
    // Only the overlap has slots for delayed weight gradients; the plain schedules, like the
    // sequential scheduler, leave them inside backward.
    const bool split_weights = overlap_ && delay_weights_ && overlap::ask_for_split_weights(env);
    Walk{env, layout, kinds, overlap_, split_weights}.run(ops);
  }

 private:
  // Walks a plan, turning each operation into env calls.
  struct Walk {
    const plx_schedule_env& env;
    const Layout& layout;
    const overlap::StageKinds& kinds;
    bool overlap;
    bool split_weights;

    void run(const std::vector<Op>& ops) const {
      for (std::size_t i = 0; i < ops.size();) {
        const Op& op = ops[i];
        if (op.kind != OpKind::forward && op.kind != OpKind::backward) {
          transfer(op);
          ++i;
          continue;
        }
        // A computation step: a lone forward or backward, or a combined pair, with the sends that
        // follow it in the plan (a step's sends come right after its computation).
        const Op* fwd = op.kind == OpKind::forward ? &op : nullptr;
        const Op* bwd = op.kind == OpKind::backward ? &op : nullptr;
        ++i;
        if (fwd != nullptr && fwd->combined) {
          if (i >= ops.size() || ops[i].kind != OpKind::backward || !ops[i].combined)
            throw plexus::sdk::Error(PLX_ERR_INTERNAL,
                                     "pipeline plan: a combined forward without its backward");
          bwd = &ops[i++];
        }
        const Op* send_fwd = nullptr;
        const Op* send_bwd = nullptr;
        auto same = [](const Op* compute, const Op& send) {
          return compute != nullptr && compute->microbatch == send.microbatch && compute->chunk == send.chunk;
        };
        for (; i < ops.size(); ++i) {
          if (send_fwd == nullptr && ops[i].kind == OpKind::send_forward && same(fwd, ops[i]))
            send_fwd = &ops[i];
          else if (send_bwd == nullptr && ops[i].kind == OpKind::send_backward && same(bwd, ops[i]))
            send_bwd = &ops[i];
          else
            break;
        }
        compute(fwd, bwd, send_fwd, send_bwd);
      }
    }

    // Runs one step's chains and starts each send as soon as its chain's last stage has been
    // issued, so the tensor travels to the neighbouring pipeline rank while the other chain of a
    // combined step still computes. A chain without stages (units that report none) sends first.
    void compute(const Op* fwd, const Op* bwd, const Op* send_fwd, const Op* send_bwd) const {
      std::vector<overlap::Node> f, b;
      if (fwd != nullptr) {
        const auto [first, count] = layout.chunks[fwd->chunk];
        f = overlap::forward_chain(fwd->microbatch, kinds, first, count);
      }
      if (bwd != nullptr) {
        const auto [first, count] = layout.chunks[bwd->chunk];
        b = overlap::backward_chain(bwd->microbatch, kinds, first, count);
      }
      // Without the overlap a step is one chain in its own order (one of f, b is empty); with it
      // the planner lays the pair (or the lone chain, with its delayed weight gradients) out in
      // slots exactly as combined_1f1b does.
      std::vector<overlap::Node> order;
      if (overlap) {
        order = overlap::interleave(f, b, split_weights);
      } else {
        order = std::move(f);
        order.insert(order.end(), b.begin(), b.end());
      }
      std::size_t last_f = order.size(), last_b = order.size();
      for (std::size_t k = 0; k < order.size(); ++k) {
        if (order[k].pass == overlap::Pass::forward) last_f = k;
        if (order[k].pass == overlap::Pass::backward) last_b = k;
      }
      if (last_f == order.size() && send_fwd != nullptr) transfer(*send_fwd);
      if (last_b == order.size() && send_bwd != nullptr) transfer(*send_bwd);
      for (std::size_t k = 0; k < order.size(); ++k) {
        overlap::run_node(env, order[k]);
        if (k == last_f && send_fwd != nullptr) transfer(*send_fwd);
        if (k == last_b && send_bwd != nullptr) transfer(*send_bwd);
      }
    }

    void transfer(const Op& op) const {
      plx_status (*call)(void*, uint32_t, uint32_t) = nullptr;
      switch (op.kind) {
        case OpKind::recv_forward:
          call = env.recv_forward;
          break;
        case OpKind::send_forward:
          call = env.send_forward;
          break;
        case OpKind::recv_backward:
          call = env.recv_backward;
          break;
        case OpKind::send_backward:
          call = env.send_backward;
          break;
        case OpKind::forward:
        case OpKind::backward:
          break;
      }
      if (call == nullptr)
        throw plexus::sdk::Error(PLX_ERR_INTERNAL,
                                 std::string("pipeline plan: no env call for ") + ps::to_string(op));
      plexus::sdk::check_host(call(env.ctx, op.microbatch, op.chunk));
    }
  };

  // The pipeline as the engine reports it; a host before 1.7 has no pipeline fields: one chunk
  // of every unit on rank 0 of 1.
  static Layout read_layout(const plx_schedule_env& env) {
    Layout layout;
    if (!PLX_HAS_FIELD(&env, plx_schedule_env, num_chunks)) {
      layout.chunks = {{0, env.num_units}};
      return layout;
    }
    layout.pipeline_size = env.pipeline_size;
    layout.pipeline_rank = env.pipeline_rank;
    const bool has_chunk_units =
        PLX_HAS_FIELD(&env, plx_schedule_env, chunk_units) && env.chunk_units != nullptr;
    if (env.num_chunks == 1 && !has_chunk_units) {
      layout.chunks = {{0, env.num_units}};
      return layout;
    }
    if (!has_chunk_units)
      throw plexus::sdk::Error(PLX_ERR_INVALID_ARGUMENT,
                               "the engine reports " + std::to_string(env.num_chunks) +
                                   " chunks on this rank but no chunk_units to find them");
    // Units are numbered over the chunks, chunk after chunk: each chunk must start where the
    // previous one ended, hold at least one unit (a chunk's forward starts at its first unit,
    // where its input arrives) and together they must hold every unit.
    uint32_t next = 0;
    for (uint32_t chunk = 0; chunk < env.num_chunks; ++chunk) {
      uint32_t first = 0, count = 0;
      plexus::sdk::check_host(env.chunk_units(env.ctx, chunk, &first, &count));
      if (first != next || count == 0 || count > env.num_units - first)
        throw plexus::sdk::Error(PLX_ERR_INVALID_ARGUMENT,
                                 "the engine reports chunk " + std::to_string(chunk) + " holding units [" +
                                     std::to_string(first) + ", " + std::to_string(first + count) + ") of " +
                                     std::to_string(env.num_units) +
                                     "; a chunk must hold at least one unit, right after "
                                     "the previous chunk's (at unit " +
                                     std::to_string(next) + ")");
      layout.chunks.emplace_back(first, count);
      next = first + count;
    }
    if (next != env.num_units)
      throw plexus::sdk::Error(PLX_ERR_INVALID_ARGUMENT, "the engine's " + std::to_string(env.num_chunks) +
                                                             " chunks hold units [0, " +
                                                             std::to_string(next) + ") but this rank has " +
                                                             std::to_string(env.num_units));
    return layout;
  }

  static void require_transfers(const plx_schedule_env& env) {
    if (!PLX_HAS_FIELD(&env, plx_schedule_env, recv_backward) || env.send_forward == nullptr ||
        env.recv_forward == nullptr || env.send_backward == nullptr || env.recv_backward == nullptr)
      throw plexus::sdk::Error(
          PLX_ERR_INVALID_ARGUMENT,
          "the engine reports pipeline size " + std::to_string(env.pipeline_size) +
              " but offers no send_forward / recv_forward / send_backward / recv_backward");
  }

  ps::Schedule schedule_;
  bool overlap_ = false;
  bool delay_weights_ = true;
  std::optional<uint32_t> group_size_;
};

class OneFOneB : public PipelineScheduler {
 public:
  explicit OneFOneB(plx_config config) : PipelineScheduler(config, ps::Schedule::one_f_one_b) {}
};

class Interleaved1F1B : public PipelineScheduler {
 public:
  explicit Interleaved1F1B(plx_config config) : PipelineScheduler(config, ps::Schedule::interleaved) {}
};

constexpr const char* kOneFOneBSchema = R"json({
  "type": "object",
  "doc": "Megatron-LM's non-interleaved 1F1B pipeline schedule (one chunk per pipeline rank); gradient accumulation without pipeline parallelism.",
  "properties": {
    "overlap_moe_expert_parallel_comm": {"type": "boolean", "default": false,
      "doc": "without pipeline parallelism only: forward(i) merged with backward(i-1) stage by stage so expert-parallel all-to-alls hide under computation (Megatron's combined 1F1B, the order of the combined_1f1b scheduler); refused at pp > 1, as in Megatron (PP > 1 with the overlap requires virtual stages: use interleaved_1f1b)"},
    "delay_weight_gradients": {"type": "boolean", "default": true,
      "doc": "with overlap_moe_expert_parallel_comm: compute the weight gradients of layers that can split them apart from their input gradients, in the slots where nothing else is ready (as combined_1f1b); ignored without the overlap"}
  }
})json";

constexpr const char* kInterleavedSchema = R"json({
  "type": "object",
  "doc": "Megatron-LM's interleaved 1F1B pipeline schedule over the virtual stages (chunks) of each pipeline rank; with one chunk per rank it runs the non-interleaved 1F1B, without pipeline parallelism gradient accumulation.",
  "properties": {
    "microbatch_group_size_per_vp_stage": {"type": "integer", "minimum": 1, "maximum": 4294967295,
      "doc": "N: contiguous microbatches a rank runs through one virtual stage before the next (Megatron's microbatch_group_size_per_vp_stage); default: the pipeline size. Must lie in [pp, train.microbatches], and train.microbatches % N must be 0 or at least pp"},
    "overlap_moe_expert_parallel_comm": {"type": "boolean", "default": false,
      "doc": "Megatron's combined 1F1B in the interleaved schedule: one more warmup forward, then each steady forward and backward (two independent virtual microbatches) run merged stage by stage so expert-parallel all-to-alls hide under computation; at pp > 1 it needs virtual stages (distributed.pipeline.virtual_stages >= 2)"},
    "delay_weight_gradients": {"type": "boolean", "default": true,
      "doc": "with overlap_moe_expert_parallel_comm: compute the weight gradients of layers that can split them apart from their input gradients, in the slots where nothing else is ready (as combined_1f1b); ignored without the overlap"}
  }
})json";

const plx_component_desc kOneFOneB = plexus::sdk::scheduler_component<OneFOneB>(
    "1f1b",
    "Megatron's non-interleaved 1F1B pipeline schedule: warmup forwards, one forward one backward, cooldown "
    "backwards; gradient accumulation at pp 1",
    kOneFOneBSchema);

const plx_component_desc kInterleaved1F1B = plexus::sdk::scheduler_component<Interleaved1F1B>(
    "interleaved_1f1b",
    "Megatron's interleaved 1F1B pipeline schedule over virtual stages, optionally with the EP overlap's "
    "combined "
    "forward-backward steps",
    kInterleavedSchema);

}  // namespace

PLEXUS_PLUGIN("pipeline_schedules", "1.0.0",
              "Pipeline-parallel schedules: Megatron's 1F1B and interleaved 1F1B", &kOneFOneB,
              &kInterleaved1F1B)

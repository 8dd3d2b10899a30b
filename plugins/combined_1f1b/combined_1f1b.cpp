// The "combined_1f1b" scheduler: gradient accumulation that hides communication stages (the
// expert-parallel all-to-alls of MoE layers) under the computation of another microbatch.
//
// A step of M microbatches runs forward(0) alone; then, for i = 1 .. M-1, forward(i)
// interleaved with backward(i-1) stage by stage (the slot planner shared with the pipeline
// schedules, plugins/common/schedule_overlap/overlap_plan.hpp, says the order); then
// backward(M-1) alone. Backward(i-1) completes before backward(i) starts, so every parameter's
// gradient accumulates microbatch 0, 1, ..., M-1 in the order of the sequential scheduler, and
// the two schedulers' results are bit-identical. Communication stages go to the communication
// stream and compute stages (and weight gradients) to the compute stream; the engine orders the
// stages of one microbatch, nothing else is serialized.
//
// With "delay_weight_gradients" (the default) the scheduler asks the engine for weight gradients
// apart (split_weight_gradients): a layer that implements backward_weights (moe.layer) then
// leaves them out of its backward, and they fill the slots of backward(i-1)'s phase where
// forward(i) has nothing to compute because its communication stage is in flight. They all run
// inside the phase, so gradients still accumulate in microbatch order.
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/cpp/plugin.hpp"
#include "plexus_schedule_overlap/overlap_plan.hpp"
#include "plexus_schedule_overlap/stage_chains.hpp"

namespace {

namespace overlap = plexus::schedule_overlap;
using overlap::Node;

class Combined1F1B {
 public:
  explicit Combined1F1B(plx_config config)
      : delay_weights_(
            plexus::sdk::Host::current().config_bool_if(config, "delay_weight_gradients").value_or(true)) {}

  void run_step(const plx_schedule_env& env) const {
    const overlap::StageKinds comm = overlap::stage_kinds(env);
    refuse_what_cannot_overlap(env, comm);
    const bool split_weights = delay_weights_ && overlap::ask_for_split_weights(env);
    const uint32_t units = env.num_units;
    run(env, overlap::interleave(overlap::forward_chain(0, comm, 0, units), {}, split_weights));
    for (uint32_t mb = 1; mb < env.num_microbatches; ++mb)
      run(env, overlap::interleave(overlap::forward_chain(mb, comm, 0, units),
                                   overlap::backward_chain(mb - 1, comm, 0, units), split_weights));
    run(env, overlap::interleave({}, overlap::backward_chain(env.num_microbatches - 1, comm, 0, units),
                                 split_weights));
  }

 private:
  // The overlap needs two microbatches and something to hide; without either it would only
  // reorder the sequential scheduler's work, so it says which scheduler to use instead.
  static void refuse_what_cannot_overlap(const plx_schedule_env& env, const overlap::StageKinds& comm) {
    if (env.num_microbatches < 2)
      throw plexus::sdk::Error(
          PLX_ERR_INVALID_ARGUMENT,
          "combined_1f1b interleaves one microbatch's forward with the previous one's backward, so it needs "
          "train.microbatches >= 2; this step has " +
              std::to_string(env.num_microbatches) +
              " (raise train.microbatches, or use scheduler.component \"sequential\")");
    for (const std::vector<bool>& unit : comm)
      for (const bool is_comm : unit)
        if (is_comm) return;
    throw plexus::sdk::Error(
        PLX_ERR_INVALID_ARGUMENT,
        "combined_1f1b hides communication stages under another microbatch's computation, but no layer of "
        "this model has one (MoE layers have them only with expert parallelism, ep > 1): there is nothing to "
        "overlap; use scheduler.component \"sequential\"");
  }

  // Weight gradients, when split, were asked for before the first backward (a host before 1.5
  // never splits: backward then computes them as before).
  static void run(const plx_schedule_env& env, const std::vector<Node>& order) {
    for (const Node& node : order) overlap::run_node(env, node);
  }

  bool delay_weights_ = true;
};

constexpr const char* kSchema = R"json({
  "type": "object",
  "doc": "The combined 1F1B scheduler: forward(i) interleaved with backward(i-1).",
  "properties": {
    "delay_weight_gradients": {"type": "boolean", "default": true,
      "doc": "compute the weight gradients of layers that can split them (moe.layer) apart from their input gradients, in the slots where the other microbatch waits for its communication; false computes them inside backward"}
  }
})json";

const plx_component_desc kCombined1F1B = plexus::sdk::scheduler_component<Combined1F1B>(
    "combined_1f1b",
    "gradient accumulation with forward(i) interleaved with backward(i-1) so communication stages hide under "
    "computation",
    kSchema);

}  // namespace

PLEXUS_PLUGIN("combined_1f1b", "1.0.0", "The combined 1F1B scheduler: expert-parallel all-to-alls overlapped",
              &kCombined1F1B)

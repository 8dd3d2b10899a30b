// The "combined_1f1b" scheduler: gradient accumulation that hides communication stages (the
// expert-parallel all-to-alls of MoE layers) under the computation of another microbatch.
//
// A step of M microbatches runs forward(0) alone; then, for i = 1 .. M-1, forward(i)
// interleaved with backward(i-1) stage by stage (overlap_plan.hpp says the order); then
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

#include "overlap_plan.hpp"
#include "plexus/cpp/plugin.hpp"

namespace {

using combined_1f1b::Node;
using combined_1f1b::Pass;

class Combined1F1B {
 public:
  explicit Combined1F1B(plx_config config)
      : delay_weights_(plexus::sdk::Host::current().config_bool_if(config, "delay_weight_gradients").value_or(true)) {}

  void run_step(const plx_schedule_env& env) const {
    const std::vector<std::vector<bool>> comm = stage_kinds(env);
    refuse_what_cannot_overlap(env, comm);
    const bool split_weights = delay_weights_ && ask_for_split_weights(env);
    run(env, combined_1f1b::interleave(forward_chain(0, comm), {}, split_weights));
    for (uint32_t mb = 1; mb < env.num_microbatches; ++mb)
      run(env, combined_1f1b::interleave(forward_chain(mb, comm), backward_chain(mb - 1, comm), split_weights));
    run(env, combined_1f1b::interleave({}, backward_chain(env.num_microbatches - 1, comm), split_weights));
  }

 private:
  // Per unit, per stage: whether it is a communication stage.
  static std::vector<std::vector<bool>> stage_kinds(const plx_schedule_env& env) {
    std::vector<std::vector<bool>> comm(env.num_units);
    for (uint32_t unit = 0; unit < env.num_units; ++unit) {
      uint32_t stages = 0;
      plexus::sdk::check_host(env.unit_num_stages(env.ctx, unit, &stages));
      for (uint32_t stage = 0; stage < stages; ++stage) {
        plx_stage_info info{};
        info.struct_size = sizeof(info);
        plexus::sdk::check_host(env.unit_stage(env.ctx, unit, stage, &info));
        comm[unit].push_back(info.kind == PLX_STAGE_COMM);
      }
    }
    return comm;
  }

  // The overlap needs two microbatches and something to hide; without either it would only
  // reorder the sequential scheduler's work, so it says which scheduler to use instead.
  static void refuse_what_cannot_overlap(const plx_schedule_env& env, const std::vector<std::vector<bool>>& comm) {
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

  // A host before 1.5 has no split_weight_gradients (and never splits): then backward computes
  // the weight gradients as before.
  static bool ask_for_split_weights(const plx_schedule_env& env) {
    if (!PLX_HAS_FIELD(&env, plx_schedule_env, split_weight_gradients) || env.split_weight_gradients == nullptr ||
        env.backward_weights == nullptr)
      return false;
    plexus::sdk::check_host(env.split_weight_gradients(env.ctx));
    return true;
  }

  static std::vector<Node> forward_chain(uint32_t mb, const std::vector<std::vector<bool>>& comm) {
    std::vector<Node> chain;
    for (uint32_t unit = 0; unit < comm.size(); ++unit)
      for (uint32_t stage = 0; stage < comm[unit].size(); ++stage)
        chain.push_back(Node{Pass::forward, mb, unit, stage, comm[unit][stage]});
    return chain;
  }

  static std::vector<Node> backward_chain(uint32_t mb, const std::vector<std::vector<bool>>& comm) {
    std::vector<Node> chain;
    for (auto unit = static_cast<uint32_t>(comm.size()); unit-- > 0;)
      for (auto stage = static_cast<uint32_t>(comm[unit].size()); stage-- > 0;)
        chain.push_back(Node{Pass::backward, mb, unit, stage, comm[unit][stage]});
    return chain;
  }

  static void run(const plx_schedule_env& env, const std::vector<Node>& order) {
    for (const Node& node : order) {
      const plx_stream stream = node.comm ? env.comm_stream : env.compute_stream;
      switch (node.pass) {
        case Pass::forward:
          plexus::sdk::check_host(env.forward(env.ctx, node.microbatch, node.unit, node.stage, stream));
          break;
        case Pass::backward:
          plexus::sdk::check_host(env.backward(env.ctx, node.microbatch, node.unit, node.stage, stream));
          break;
        case Pass::weights:
          plexus::sdk::check_host(env.backward_weights(env.ctx, node.microbatch, node.unit, env.compute_stream));
          break;
      }
    }
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

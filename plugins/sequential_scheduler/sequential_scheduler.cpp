// The "sequential" scheduler: gradient accumulation, one microbatch at a time.
//
// For each microbatch: every unit's forward stages in order, then every unit's backward
// stages in reverse. Running a microbatch's backward right after its forward keeps only one
// microbatch's activations alive. Communication stages go to the communication stream and
// compute stages to the compute stream; the engine orders the stages of one microbatch.
#include <cstdint>
#include <string>

#include "plexus/cpp/plugin.hpp"

namespace {

class SequentialScheduler {
 public:
  explicit SequentialScheduler(plx_config /*config*/) {}

  void run_step(const plx_schedule_env& env) const {
    // A pipeline stage must move its chunks' boundaries to its neighbours (ABI 1.7); this
    // scheduler runs a whole model.
    if (env.struct_size >= PLX_FIELD_END(plx_schedule_env, pipeline_size) && env.pipeline_size > 1)
      throw plexus::sdk::Error(
          PLX_ERR_INVALID_ARGUMENT,
          "scheduler \"sequential\" runs a whole model, but this rank is one of " +
              std::to_string(env.pipeline_size) +
              " pipeline stages: use scheduler.component \"1f1b\" or \"interleaved_1f1b\" "
              "(plugin pipeline_schedules)");
    for (uint32_t mb = 0; mb < env.num_microbatches; ++mb) {
      for (uint32_t unit = 0; unit < env.num_units; ++unit) {
        const uint32_t stages = num_stages(env, unit);
        for (uint32_t stage = 0; stage < stages; ++stage)
          plexus::sdk::check_host(env.forward(env.ctx, mb, unit, stage, stream_for(env, unit, stage)));
      }
      for (uint32_t unit = env.num_units; unit-- > 0;) {
        // Weight gradients come with the input gradients: nothing here could hide them, so this
        // scheduler never asks for them apart (split_weight_gradients).
        for (uint32_t stage = num_stages(env, unit); stage-- > 0;)
          plexus::sdk::check_host(env.backward(env.ctx, mb, unit, stage, stream_for(env, unit, stage)));
      }
    }
  }

 private:
  static uint32_t num_stages(const plx_schedule_env& env, uint32_t unit) {
    uint32_t stages = 0;
    plexus::sdk::check_host(env.unit_num_stages(env.ctx, unit, &stages));
    return stages;
  }
  static plx_stream stream_for(const plx_schedule_env& env, uint32_t unit, uint32_t stage) {
    plx_stage_info info{};
    info.struct_size = sizeof(info);
    plexus::sdk::check_host(env.unit_stage(env.ctx, unit, stage, &info));
    return info.kind == PLX_STAGE_COMM ? env.comm_stream : env.compute_stream;
  }
};

constexpr const char* kSchema =
    R"({"type": "object", "doc": "The sequential scheduler has no options.", "properties": {}})";

const plx_component_desc kSequential = plexus::sdk::scheduler_component<SequentialScheduler>(
    "sequential", "gradient accumulation: each microbatch's forward, then its backward", kSchema);

}  // namespace

PLEXUS_PLUGIN("sequential_scheduler", "1.0.0", "Schedulers that need no communication overlap", &kSequential)

// The plx_schedule_env a scheduler plugin drives the model through. Its callbacks are C
// functions called from inside the plugin: no exception may cross back through it, so each
// callback keeps the first exception and returns a status; forward_backward rethrows it after
// the scheduler returns, so the user sees the engine's own error (e.g. a non-finite loss).
//
// A scheduler's units are the logical units of the model's one chunk (the embedding, each
// logical decoder layer, the final norm, the head); a unit's stages are its model units' in order.
#include <exception>

#include "engine/model_internal.hpp"
#include "host_services/last_error.hpp"

namespace plexus {

struct ScheduleEnvBridge {
  Model* model = nullptr;
  std::exception_ptr error;

  template <class Body>
  static plx_status call(void* ctx, Body&& body) noexcept {
    auto* self = static_cast<ScheduleEnvBridge*>(ctx);
    if (self->error) return PLX_ERR_INTERNAL;  // stop at the first failure
    try {
      body(*self->model);
      return PLX_OK;
    } catch (const std::exception& e) {
      self->error = std::current_exception();
      return detail::fail(PLX_ERR_INTERNAL, e.what());
    } catch (...) {
      self->error = std::current_exception();
      return detail::fail(PLX_ERR_INTERNAL, "unknown exception in the engine");
    }
  }
  static const Model::Chunk& chunk(const Model& m) { return m.chunks_[0]; }
  static Model::Run& run_of(Model& m, uint32_t microbatch) {
    if (microbatch >= m.runs_[0].size())
      throw std::runtime_error("scheduler asked for microbatch " + std::to_string(microbatch) + " of " +
                               std::to_string(m.runs_[0].size()));
    return *m.runs_[0][microbatch];
  }
  static const LogicalUnit& logical_of(const Model& m, uint32_t unit) {
    const std::vector<LogicalUnit>& logical = chunk(m).logical;
    if (unit >= logical.size())
      throw std::runtime_error("scheduler asked for unit " + std::to_string(unit) + " of " +
                               std::to_string(logical.size()));
    return logical[unit];
  }
  struct ModelStage {
    std::size_t unit = 0;
    uint32_t stage = 0;
  };
  static ModelStage model_stage(const Model& m, uint32_t unit, uint32_t stage) {
    const LogicalUnit& logical = logical_of(m, unit);
    uint32_t local = stage;
    for (std::size_t u = logical.first; u < logical.first + logical.count; ++u) {
      const uint32_t stages = m.units_[u]->num_stages();
      if (local < stages) return {u, local};
      local -= stages;
    }
    throw std::runtime_error("scheduler asked for stage " + std::to_string(stage) + " of unit " +
                             std::to_string(unit) + ", which has " + std::to_string(stage - local));
  }
  static uint32_t stage_count(const Model& m, uint32_t unit) {
    const LogicalUnit& logical = logical_of(m, unit);
    uint32_t total = 0;
    for (std::size_t u = logical.first; u < logical.first + logical.count; ++u)
      total += m.units_[u]->num_stages();
    return total;
  }
  static plx_status num_stages(void* ctx, uint32_t unit, uint32_t* out) noexcept {
    return call(ctx, [&](Model& m) { *out = stage_count(m, unit); });
  }
  static plx_status stage(void* ctx, uint32_t unit, uint32_t index, plx_stage_info* out) noexcept {
    return call(ctx, [&](Model& m) {
      const ModelStage p = model_stage(m, unit, index);
      const plx_stage_info& info = m.units_[p.unit]->stages[p.stage];
      out->kind = info.kind;
      if (out->struct_size >= PLX_FIELD_END(plx_stage_info, name)) out->name = info.name;
    });
  }
  static plx_status forward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream) noexcept {
    return call(ctx, [&](Model& m) {
      const ModelStage p = model_stage(m, unit, stage);
      m.forward_stage(run_of(m, mb), p.unit, p.stage);
    });
  }
  static plx_status backward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream) noexcept {
    return call(ctx, [&](Model& m) {
      const ModelStage p = model_stage(m, unit, stage);
      m.backward_stage(run_of(m, mb), p.unit, p.stage);
    });
  }
  // A logical unit's weight gradients: its model units' in backward order.
  static plx_status backward_weights(void* ctx, uint32_t mb, uint32_t unit, plx_stream) noexcept {
    return call(ctx, [&](Model& m) {
      Model::Run& run = run_of(m, mb);
      const LogicalUnit& logical = logical_of(m, unit);
      for (std::size_t u = logical.first + logical.count; u-- > logical.first;) m.backward_weights(run, u);
    });
  }
  static plx_status split_weight_gradients(void* ctx) noexcept {
    return call(ctx, [&](Model& m) {
      const std::size_t last = chunk(m).end_unit - 1;
      for (const auto& run : m.runs_[0])
        if (run->backward_unit != static_cast<int64_t>(last) ||
            run->backward_stage + 1 != m.units_[last]->num_stages() ||
            run->weights[last] != WeightGrads::with_backward)
          throw std::runtime_error(
              "split_weight_gradients: the scheduler must ask before the step's first backward "
              "call (microbatch " +
              std::to_string(run->microbatch) + " has begun its backward)");
      m.split_weights_ = true;
    });
  }
};

double Model::forward_backward(const SchedulerInstance& scheduler, const std::vector<Batch>& microbatches) {
  const Chunk& whole = whole_model_chunk("forward_backward");
  start_microbatches(microbatches, true);
  ScheduleEnvBridge bridge{this, nullptr};
  plx_schedule_env env{};
  env.struct_size = sizeof(env);
  env.num_microbatches = static_cast<uint32_t>(microbatches.size());
  env.num_units = static_cast<uint32_t>(whole.logical.size());
  env.ctx = &bridge;
  env.unit_num_stages = &ScheduleEnvBridge::num_stages;
  env.unit_stage = &ScheduleEnvBridge::stage;
  env.forward = &ScheduleEnvBridge::forward;
  env.backward = &ScheduleEnvBridge::backward;
  // Weight gradients come with the input gradients unless the scheduler asks for them apart.
  env.backward_weights = &ScheduleEnvBridge::backward_weights;
  env.split_weight_gradients = &ScheduleEnvBridge::split_weight_gradients;
  split_weights_ = false;
  try {
    scheduler.run_step(env);
    split_weights_ = false;
    return finish_microbatches();
  } catch (...) {
    runs_.clear();
    split_weights_ = false;
    if (bridge.error) std::rethrow_exception(bridge.error);
    throw;
  }
}

}  // namespace plexus

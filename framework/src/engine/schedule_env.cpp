// The plx_schedule_env a scheduler plugin drives the model through. Its callbacks are C
// functions called from inside the plugin: no exception may cross back through it, so each
// callback keeps the first exception and returns a status; forward_backward rethrows it after
// the scheduler returns, so the user sees the engine's own error (e.g. a non-finite loss).
#include <cmath>
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
  static Model::Run& run_of(Model& m, uint32_t microbatch) {
    if (microbatch >= m.runs_.size())
      throw std::runtime_error("scheduler asked for microbatch " + std::to_string(microbatch) + " of " +
                               std::to_string(m.runs_.size()));
    return *m.runs_[microbatch];
  }
  static plx_status num_stages(void* ctx, uint32_t unit, uint32_t* out) noexcept {
    return call(ctx, [&](Model& m) { *out = static_cast<uint32_t>(m.units_.at(unit)->stages.size()); });
  }
  static plx_status stage(void* ctx, uint32_t unit, uint32_t index, plx_stage_info* out) noexcept {
    return call(ctx, [&](Model& m) {
      const plx_stage_info& info = m.units_.at(unit)->stages.at(index);
      out->kind = info.kind;
      if (out->struct_size >= PLX_FIELD_END(plx_stage_info, name)) out->name = info.name;
    });
  }
  static plx_status forward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream) noexcept {
    return call(ctx, [&](Model& m) { m.forward_stage(run_of(m, mb), unit, stage); });
  }
  static plx_status backward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream) noexcept {
    return call(ctx, [&](Model& m) { m.backward_stage(run_of(m, mb), unit, stage); });
  }
};

double Model::forward_backward(const SchedulerInstance& scheduler, const std::vector<Batch>& microbatches) {
  if (microbatches.empty()) throw std::runtime_error("a step needs at least one microbatch");
  runs_.clear();
  gradient_pending_.assign(params_.size(), 0);
  for (const auto& unit : units_)
    for (std::size_t i : unit->gradient_params)
      gradient_pending_[i] += static_cast<int64_t>(microbatches.size());
  const double scale = 1.0 / static_cast<double>(microbatches.size());
  for (uint32_t i = 0; i < microbatches.size(); ++i)
    runs_.push_back(start_run(microbatches[i], true, i, scale));
  ScheduleEnvBridge bridge{this, nullptr};
  plx_schedule_env env{};
  env.struct_size = sizeof(env);
  env.num_microbatches = static_cast<uint32_t>(microbatches.size());
  env.num_units = static_cast<uint32_t>(units_.size());
  env.ctx = &bridge;
  env.unit_num_stages = &ScheduleEnvBridge::num_stages;
  env.unit_stage = &ScheduleEnvBridge::stage;
  env.forward = &ScheduleEnvBridge::forward;
  env.backward = &ScheduleEnvBridge::backward;
  env.backward_weights = nullptr;  // weight gradients are computed with the input gradients
  try {
    scheduler.run_step(env);
  } catch (...) {
    runs_.clear();
    gradient_pending_.clear();
    if (bridge.error) std::rethrow_exception(bridge.error);
    throw;
  }
  double loss = 0;
  for (const auto& run : runs_) {
    if (run->backward_unit >= 0)
      throw std::runtime_error("the scheduler returned before the backward of microbatch " +
                               std::to_string(run->microbatch) + " completed");
    loss += run->loss;
  }
  runs_.clear();
  gradient_pending_.clear();
  if (!std::isfinite(loss)) throw NonFiniteError("non-finite loss");
  return loss / static_cast<double>(microbatches.size());
}

}  // namespace plexus

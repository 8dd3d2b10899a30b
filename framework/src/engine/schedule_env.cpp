// The plx_schedule_env a scheduler plugin drives the model through. Its callbacks are C
// functions called from inside the plugin: no exception may cross back through it, so each
// callback keeps the first exception and returns a status; forward_backward rethrows it after
// the scheduler returns, so the user sees the engine's own error (e.g. a non-finite loss).
//
// A scheduler's units are the logical units of this rank's chunks, chunk after chunk (the
// embedding, each logical decoder layer, the final norm, the head, as far as a chunk holds them);
// a unit's stages are its model units' in order. Pipelined (ABI 1.7), the scheduler also moves the
// chunks' boundaries between stages (PipelineLink).
#include <exception>

#include "engine/model_internal.hpp"
#include "engine/pipeline_link.hpp"
#include "host_services/last_error.hpp"
#include "plexus/core/engine/timeline.hpp"

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

  // A scheduler's unit: its chunk and its logical unit there.
  struct Place {
    uint32_t chunk = 0;
    const LogicalUnit* logical = nullptr;
  };
  static uint32_t unit_count(const Model& m) {
    uint32_t total = 0;
    for (const Model::Chunk& chunk : m.chunks_) total += static_cast<uint32_t>(chunk.logical.size());
    return total;
  }
  static Place place_of(const Model& m, uint32_t unit) {
    uint32_t first = 0;
    for (uint32_t c = 0; c < m.chunks_.size(); ++c) {
      const auto count = static_cast<uint32_t>(m.chunks_[c].logical.size());
      if (unit < first + count) return {c, &m.chunks_[c].logical[unit - first]};
      first += count;
    }
    throw std::runtime_error("scheduler asked for unit " + std::to_string(unit) + " of " +
                             std::to_string(unit_count(m)));
  }
  static const Model::Chunk& chunk_at(const Model& m, uint32_t chunk) {
    if (chunk >= m.chunks_.size())
      throw std::runtime_error("scheduler asked for chunk " + std::to_string(chunk) + " of " +
                               std::to_string(m.chunks_.size()));
    return m.chunks_[chunk];
  }
  static Model::Run& run_of(Model& m, uint32_t chunk, uint32_t microbatch) {
    if (microbatch >= m.runs_.at(chunk).size())
      throw std::runtime_error("scheduler asked for microbatch " + std::to_string(microbatch) + " of " +
                               std::to_string(m.runs_.at(chunk).size()));
    return *m.runs_[chunk][microbatch];
  }
  struct ModelStage {
    uint32_t chunk = 0;
    std::size_t unit = 0;
    uint32_t stage = 0;
  };
  static ModelStage model_stage(const Model& m, uint32_t unit, uint32_t stage) {
    const Place place = place_of(m, unit);
    uint32_t local = stage;
    for (std::size_t u = place.logical->first; u < place.logical->first + place.logical->count; ++u) {
      const uint32_t stages = m.units_[u]->num_stages();
      if (local < stages) return {place.chunk, u, local};
      local -= stages;
    }
    throw std::runtime_error("scheduler asked for stage " + std::to_string(stage) + " of unit " +
                             std::to_string(unit) + ", which has " + std::to_string(stage - local));
  }
  static uint32_t stage_count(const Model& m, uint32_t unit) {
    const Place place = place_of(m, unit);
    uint32_t total = 0;
    for (std::size_t u = place.logical->first; u < place.logical->first + place.logical->count; ++u)
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
      m.forward_stage(run_of(m, p.chunk, mb), p.unit, p.stage);
    });
  }
  static plx_status backward(void* ctx, uint32_t mb, uint32_t unit, uint32_t stage, plx_stream) noexcept {
    return call(ctx, [&](Model& m) {
      const ModelStage p = model_stage(m, unit, stage);
      m.backward_stage(run_of(m, p.chunk, mb), p.unit, p.stage);
    });
  }
  // A logical unit's weight gradients: its model units' in backward order.
  static plx_status backward_weights(void* ctx, uint32_t mb, uint32_t unit, plx_stream) noexcept {
    return call(ctx, [&](Model& m) {
      const Place place = place_of(m, unit);
      Model::Run& run = run_of(m, place.chunk, mb);
      for (std::size_t u = place.logical->first + place.logical->count; u-- > place.logical->first;)
        m.backward_weights(run, u);
    });
  }
  static plx_status split_weight_gradients(void* ctx) noexcept {
    return call(ctx, [&](Model& m) {
      for (const auto& chunk_runs : m.runs_)
        for (const auto& run : chunk_runs) {
          const std::size_t last = run->chunk->end_unit - 1;
          if (run->backward_unit != static_cast<int64_t>(last) ||
              run->backward_stage + 1 != m.units_[last]->num_stages() ||
              run->weights[last] != WeightGrads::with_backward)
            throw std::runtime_error(
                "split_weight_gradients: the scheduler must ask before the step's first backward call "
                "(microbatch " +
                std::to_string(run->microbatch) + " has begun its backward)");
        }
      m.split_weights_ = true;
    });
  }

  // ---- ABI 1.7: chunks and the transfers between pipeline stages ----
  static plx_status chunk_units(void* ctx, uint32_t chunk, uint32_t* first, uint32_t* count) noexcept {
    return call(ctx, [&](Model& m) {
      (void)chunk_at(m, chunk);
      uint32_t before = 0;
      for (uint32_t c = 0; c < chunk; ++c) before += static_cast<uint32_t>(m.chunks_[c].logical.size());
      *first = before;
      *count = static_cast<uint32_t>(m.chunks_[chunk].logical.size());
    });
  }
  // The transfers are the model's (Model::send_chunk_output, ...): the scheduler names a chunk
  // of this rank, the model its place in the pipeline.
  static plx_status send_forward(void* ctx, uint32_t mb, uint32_t chunk) noexcept {
    return call(ctx, [&](Model& m) {
      (void)chunk_at(m, chunk);
      m.send_chunk_output(chunk, mb);
    });
  }
  static plx_status recv_forward(void* ctx, uint32_t mb, uint32_t chunk) noexcept {
    return call(ctx, [&](Model& m) {
      (void)chunk_at(m, chunk);
      m.receive_chunk_input(chunk, mb);
    });
  }
  static plx_status send_backward(void* ctx, uint32_t mb, uint32_t chunk) noexcept {
    return call(ctx, [&](Model& m) {
      (void)chunk_at(m, chunk);
      m.send_chunk_input_grad(chunk, mb);
    });
  }
  static plx_status recv_backward(void* ctx, uint32_t mb, uint32_t chunk) noexcept {
    return call(ctx, [&](Model& m) {
      (void)chunk_at(m, chunk);
      m.receive_chunk_output_grad(chunk, mb);
    });
  }
};

double Model::forward_backward(const SchedulerInstance& scheduler, const std::vector<Batch>& microbatches) {
  if (!link_) (void)whole_model_chunk("forward_backward");
  start_microbatches(microbatches, true);
  ScheduleEnvBridge bridge{this, nullptr};
  plx_schedule_env env{};
  env.struct_size = sizeof(env);
  env.num_microbatches = static_cast<uint32_t>(microbatches.size());
  env.num_units = ScheduleEnvBridge::unit_count(*this);
  env.ctx = &bridge;
  env.unit_num_stages = &ScheduleEnvBridge::num_stages;
  env.unit_stage = &ScheduleEnvBridge::stage;
  env.forward = &ScheduleEnvBridge::forward;
  env.backward = &ScheduleEnvBridge::backward;
  // Weight gradients come with the input gradients unless the scheduler asks for them apart.
  env.backward_weights = &ScheduleEnvBridge::backward_weights;
  env.split_weight_gradients = &ScheduleEnvBridge::split_weight_gradients;
  env.num_chunks = static_cast<uint32_t>(chunks_.size());
  env.pipeline_rank = link_ ? link_->rank() : 0;
  env.pipeline_size = link_ ? link_->size() : 1;
  env.chunk_units = &ScheduleEnvBridge::chunk_units;
  env.send_forward = &ScheduleEnvBridge::send_forward;
  env.recv_forward = &ScheduleEnvBridge::recv_forward;
  env.send_backward = &ScheduleEnvBridge::send_backward;
  env.recv_backward = &ScheduleEnvBridge::recv_backward;
  split_weights_ = false;
  try {
    {
      const Timeline::Scope span(timeline_, "pipeline schedule", "step");
      scheduler.run_step(env);
    }
    split_weights_ = false;
    if (link_) {
      const Timeline::Scope span(timeline_, "wait: sends", "comm");
      link_->finish();
    }
    return finish_microbatches();
  } catch (...) {
    runs_.clear();
    split_weights_ = false;
    if (link_) link_->abandon();
    if (bridge.error) std::rethrow_exception(bridge.error);
    throw;
  }
}

}  // namespace plexus

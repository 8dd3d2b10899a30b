// One MIMO training step, Megatron's multi-module 1F1B (mimo_schedule.hpp): each encoder lane
// runs its forward, stage after stage, and its last stage hands its outputs over the bridge to the
// language lanes whose samples they are; the language lane's first stage splices them into its
// input, its stages run forward and backward, and its first stage hands the spliced rows'
// gradients back; the encoder lanes run their backward. Then each module averages its gradients over its own
// data-parallel lanes, every rank agrees whether a gradient is not finite, and every module clips by one norm
// over all modules' gradients (Megatron's MimoOptimizer) before its AdamW step.
#include <cmath>
#include <string>
#include <vector>

#include "engine/mimo/mimo_schedule.hpp"
#include "engine/mimo/mimo_trainer_impl.hpp"

namespace plexus {

// Starts `count` microbatches (training ones from index first_index of the run, or validation
// ones) on every model here: each lane reads its rows of each global microbatch.
MimoTrainer::Impl::Microbatches MimoTrainer::Impl::start(int64_t first_index, int64_t count, bool training,
                                                         bool validation) {
  Microbatches mb;
  mb.encoder_samples.resize(static_cast<std::size_t>(count));
  mb.language_samples.resize(static_cast<std::size_t>(count));
  const auto samples = [&](int64_t index, int64_t first, int64_t n) {
    return validation ? data->valid_samples(index, rows, first, n)
                      : data->train_samples(index, rows, first, n);
  };
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here) continue;
    const bool encoder = modules[m].encoder;
    const int64_t lane_rows = rows / modules[m].dp_size;
    std::vector<Batch> batches;
    for (int64_t k = 0; k < count; ++k) {
      std::vector<int64_t> ids = samples(first_index + k, modules[m].dp_rank * lane_rows, lane_rows);
      batches.push_back(encoder ? data->encoder_batch(ids, patch_sizes[m]) : data->language_batch(ids));
      (encoder ? mb.encoder_samples : mb.language_samples)[static_cast<std::size_t>(k)] = std::move(ids);
    }
    models[m]->start_microbatches(batches, training);
  }
  return mb;
}

// Microbatch k through module m's stage here: its input (the previous stage's stream, or at the
// language model's first stage the encoders' rows to splice), its forward, its output on (to the
// next stage, or over the bridge from an encoder's last stage). The language model keeps the loss
// until finish_microbatches.
void MimoTrainer::Impl::forward(std::size_t m, uint32_t k, const Microbatches& mb) {
  const MimoModule& module = modules[m];
  const distributed::ModuleGroupScope scope(module.name);
  Model& model = *models[m];
  if (!module.first_stage()) model.receive_chunk_input(0, k);
  if (!module.encoder && module.first_stage())
    for (std::size_t e = 0; e < encoders(); ++e) {
      const Timeline::Scope span(timeline.get(), "wait: " + modules[e].name + " rows", "comm", k);
      model.set_splice(0, k, e, bridges[e]->receive_outputs(k, mb.language_samples[k]));
    }
  model.forward_chunk(0, k);
  if (!module.last_stage()) {
    model.send_chunk_output(0, k);
  } else if (module.encoder) {
    Tensor output = model.take_chunk_output(0, k);
    if (zero_modalities) output.zero();
    bridges[m]->send_outputs(k, std::move(output), mb.encoder_samples[k]);
  }
}

// Its backward the same way round: the output's gradient (from the next stage, or over the
// bridge at an encoder's last stage), the backward, the input's gradient back (to the previous
// stage, or the spliced rows' over the bridge from the language model's first stage).
void MimoTrainer::Impl::backward(std::size_t m, uint32_t k) {
  const MimoModule& module = modules[m];
  const distributed::ModuleGroupScope scope(module.name);
  Model& model = *models[m];
  if (!module.last_stage())
    model.receive_chunk_output_grad(0, k);
  else if (module.encoder) {
    const Timeline::Scope span(timeline.get(), "wait: rows' gradient", "comm", k);
    model.set_chunk_output_grad(0, k, bridges[m]->receive_grads(k));
  }
  model.backward_chunk(0, k);
  if (!module.first_stage()) {
    model.send_chunk_input_grad(0, k);
  } else if (!module.encoder) {
    for (std::size_t e = 0; e < encoders(); ++e) {
      Tensor grad = model.take_splice_grad(0, k, e);
      if (zero_modalities) grad.zero();  // zeros depend on no encoder weight
      bridges[e]->send_grads(k, grad);
    }
  }
}

// Every microbatch of `mb` through the modules here in mimo_schedule's order, then every transfer
// completed.
void MimoTrainer::Impl::run_microbatches(const Microbatches& mb, bool training) {
  const auto count = static_cast<uint32_t>(mb.language_samples.size());
  try {
    for (const MimoOp& op : mimo_schedule(modules, count, training)) {
      if (op.kind == MimoOp::Kind::forward)
        forward(op.module, op.microbatch, mb);
      else
        backward(op.module, op.microbatch);
    }
    for (std::size_t m = 0; m < modules.size(); ++m)
      if (modules[m].here) models[m]->finish_transfers();
    for (const auto& bridge : bridges) bridge->finish();
  } catch (...) {
    for (std::size_t m = 0; m < modules.size(); ++m)
      if (modules[m].here) models[m]->abandon_transfers();
    for (const auto& bridge : bridges) bridge->abandon();
    throw;
  }
}

// Ends the microbatches on every model here; the language model's loss, the mean over its lanes,
// on every rank (each lane's leader at its last stage counts it once).
double MimoTrainer::Impl::finish_microbatches() {
  double loss = 0;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here) continue;
    const double l = models[m]->finish_microbatches();
    if (!modules[m].encoder && modules[m].leader && modules[m].last_stage())
      loss = l / static_cast<double>(language().dp_size);
  }
  return over_world(loss, distributed::ReduceOp::sum);
}

// Each module's gradients averaged over its data-parallel lanes (its update's strategy, over its
// own dp group), then a tied parameter's summed over the stages that hold it.
void MimoTrainer::Impl::reduce_gradients() {
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) {
      const distributed::ModuleGroupScope scope(modules[m].name);
      updates[m]->finish_gradients(nullptr);
    }
  // After the data-parallel reduction, as Megatron: the stages holding a tied parameter sum it.
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (tied_groups[m] == nullptr) continue;
    for (std::size_t p = 0; p < stages[m].shared.size(); ++p)
      if (stages[m].shared[p]) updates[m]->all_reduce_gradient(p, *tied_groups[m]);
  }
}

// Every rank stops together when any finds a non-finite gradient (Megatron's found_inf, the
// world's maximum), naming it on the rank that found it.
void MimoTrainer::Impl::check_gradients_finite() const {
  std::string found;
  for (std::size_t m = 0; m < modules.size() && found.empty(); ++m) {
    if (!modules[m].here) continue;
    try {
      updates[m]->check_gradients_finite();
    } catch (const NonFiniteError& e) {
      found = modules[m].name + ": " + e.what();
    }
  }
  if (over_world(found.empty() ? 0.0 : 1.0, distributed::ReduceOp::max) > 0)
    throw NonFiniteError(found.empty() ? "a non-finite gradient on another rank (its message names it)"
                                       : found);
}

// Megatron's MimoOptimizer: a vector of the modules' squared gradient norms (0 for a module not
// here), its maximum over the world (a module's ranks agree on its norm), summed: one norm.
double MimoTrainer::Impl::clip_norm() const {
  std::vector<double> squares(modules.size(), 0.0);
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) squares[m] = updates[m]->squared_gradient_norm();
  if (runtime != nullptr && runtime->world_size() > 1) {
    const Tensor view = Tensor::borrowed(squares.data(), {static_cast<int64_t>(squares.size())},
                                         plx_dtype_f64(), DLDevice{kDLCPU, 0});
    runtime->world().all_reduce(view.view(), distributed::ReduceOp::max);
  }
  double total = 0;
  for (double s : squares) total += s;
  return std::sqrt(total);
}

double MimoTrainer::Impl::train_step(int64_t step) {
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) updates[m]->begin_step(microbatches);
  double loss = 0;
  {
    const Timeline::Scope span(timeline.get(), "pipeline schedule", "step");
    run_microbatches(start(step * microbatches, microbatches, true, false), true);
    loss = finish_microbatches();
  }
  {
    const Timeline::Scope span(timeline.get(), "gradient reduction", "comm");
    reduce_gradients();
  }
  const Timeline::Scope span(timeline.get(), "optimizer (clip, AdamW)", "update");
  check_gradients_finite();
  const double norm = clip_norm();
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) updates[m]->apply_with_norm(step, norm);
  return loss;
}

}  // namespace plexus

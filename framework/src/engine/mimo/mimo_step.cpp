// One MIMO training step, Megatron's multi-module 1F1B with one stage per module: for each
// microbatch every encoder lane runs its forward and hands its outputs over the bridge to the
// language lanes whose samples they are; the language lane splices them into its input, runs
// forward and backward, and hands the spliced rows' gradients back; the encoder lanes run their
// backward. Then each module averages its gradients over its own data-parallel lanes, every rank
// agrees whether a gradient is not finite, and every module clips by one norm over all modules'
// gradients (Megatron's MimoOptimizer) before its AdamW step.
#include <cmath>
#include <string>
#include <vector>

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

// Microbatch k through every module here: the encoders' forward, the bridge, the language
// model's forward (and backward), the bridge back, the encoders' backward. The language model
// keeps the loss until finish_microbatches.
void MimoTrainer::Impl::run_microbatch(const Microbatches& mb, uint32_t k, bool training) {
  std::vector<Tensor> spliced(encoders());
  for (std::size_t e = 0; e < encoders(); ++e) {
    Tensor output;
    if (modules[e].here) {
      const distributed::ModuleGroupScope scope(modules[e].name);
      models[e]->forward_chunk(0, k);
      output = models[e]->take_chunk_output(0, k);
      if (zero_modalities) output.zero();
    }
    spliced[e] = bridges[e]->forward(output, mb.encoder_samples[k], mb.language_samples[k]);
  }
  std::vector<Tensor> grads(encoders());
  if (language().here) {
    const distributed::ModuleGroupScope scope(language().name);
    Model& lm = *language_model();
    for (std::size_t e = 0; e < encoders(); ++e) lm.set_splice(0, k, e, std::move(spliced[e]));
    lm.forward_chunk(0, k);
    if (training) {
      lm.backward_chunk(0, k);
      for (std::size_t e = 0; e < encoders(); ++e) {
        grads[e] = lm.take_splice_grad(0, k, e);
        if (zero_modalities) grads[e].zero();  // zeros depend on no encoder weight
      }
    }
  }
  if (!training) return;
  for (std::size_t e = 0; e < encoders(); ++e) {
    Tensor grad = bridges[e]->backward(grads[e]);
    if (!modules[e].here) continue;
    const distributed::ModuleGroupScope scope(modules[e].name);
    models[e]->set_chunk_output_grad(0, k, std::move(grad));
    models[e]->backward_chunk(0, k);
  }
}

// Ends the microbatches on every model here; the language model's loss, the mean over its lanes,
// on every rank (each lane's leader counts it once).
double MimoTrainer::Impl::finish_microbatches() {
  double loss = 0;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here) continue;
    const double l = models[m]->finish_microbatches();
    if (!modules[m].encoder && modules[m].leader) loss = l / static_cast<double>(language().dp_size);
  }
  return over_world(loss, distributed::ReduceOp::sum);
}

// Each module's gradients averaged over its data-parallel lanes (its own dp group).
void MimoTrainer::Impl::reduce_gradients() {
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here || modules[m].dp == nullptr) continue;
    ParameterStore& store = models[m]->parameters();
    for (std::size_t p = 0; p < store.size(); ++p)
      if (!store[p].is_buffer()) modules[m].dp->all_reduce(store[p].grad.view(), distributed::ReduceOp::avg);
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
  const Microbatches mb = start(step * microbatches, microbatches, true, false);
  for (uint32_t k = 0; k < static_cast<uint32_t>(microbatches); ++k) run_microbatch(mb, k, true);
  const double loss = finish_microbatches();
  reduce_gradients();
  check_gradients_finite();
  const double norm = clip_norm();
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) updates[m]->apply_with_norm(step, norm);
  return loss;
}

}  // namespace plexus

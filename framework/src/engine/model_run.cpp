// Running the model: the stages of one microbatch through one chunk, in the order a scheduler
// chooses. Each stage reads as one sentence (docs/architecture.md):
//   forward:  acquire the unit's parameters -> its inputs -> the layer call -> the connection
//             folds its output into the stream -> release;
//   backward: acquire -> its output gradient -> the layer call -> the connection folds its input
//             gradient into the stream's gradient -> hand its gradients over.
// Dataflow of a microbatch (the stream is the connection's):
//   embedding(tokens) -> stream;  for each decoder layer F: stream = connection(stream, F);
//   final_norm(stream) -> y;  head(y, targets) -> loss, logits;
// and backward the same chain in reverse.
#include <string>

#include "engine/device_ops.hpp"
#include "engine/model_internal.hpp"
#include "engine/mtp_inputs.hpp"
#include "engine/pipeline_link.hpp"
#include "engine/unit_call.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/step_profile.hpp"
#include "plexus/core/engine/timeline.hpp"

namespace plexus {
namespace {

DLTensor absent(const Tensor& like) {
  DLTensor view = like.view();
  view.data = nullptr;  // "no gradient needed" per the layer contract
  return view;
}

void check_forward_order(const Model::Run& run, std::size_t u, uint32_t stage) {
  if (run.forward_complete() || u != run.forward_unit || stage != run.forward_stage)
    throw std::runtime_error("schedule order: forward of microbatch " + std::to_string(run.microbatch) +
                             ", unit " + std::to_string(u) + " stage " + std::to_string(stage) +
                             " ran before forward unit " + std::to_string(run.forward_unit) + " stage " +
                             std::to_string(run.forward_stage));
  if (u == run.chunk->first_unit && stage == 0 && !run.chunk->embedding && !run.input_set)
    throw std::runtime_error(
        "forward of microbatch " + std::to_string(run.microbatch) +
        " of a chunk that starts after the embedding, before its input arrived (set_chunk_input)");
}

void check_backward_order(const Model::Run& run, std::size_t u, uint32_t stage) {
  if (!run.training)
    throw std::runtime_error("backward of a microbatch whose forward was not a training forward");
  if (!run.forward_complete() || static_cast<int64_t>(u) != run.backward_unit || stage != run.backward_stage)
    throw std::runtime_error("schedule order: backward of microbatch " + std::to_string(run.microbatch) +
                             ", unit " + std::to_string(u) + " stage " + std::to_string(stage) +
                             " ran out of order (expected unit " + std::to_string(run.backward_unit) +
                             " stage " + std::to_string(run.backward_stage) +
                             (run.forward_complete() ? ")" : ", after its forward completes)"));
}

// The last unit's backward needs the gradient of the chunk's output, unless the chunk ends with
// a head whose loss seeds it.
void check_output_grad(const Model::Run& run, std::size_t u, bool loss_head) {
  if (static_cast<int64_t>(u) + 1 == static_cast<int64_t>(run.chunk->end_unit) &&
      !(run.chunk->head && loss_head) && !run.output_grad_set)
    throw std::runtime_error(
        "backward of microbatch " + std::to_string(run.microbatch) + " of a chunk " +
        (run.chunk->head ? "that ends with an encoder's output" : "that ends before the head") +
        ", before its output gradient arrived (set_chunk_output_grad)");
}

}  // namespace

std::unique_ptr<Model::Run> Model::start_run(uint32_t chunk_index, const Batch& batch, bool training,
                                             uint32_t microbatch, double loss_scale) {
  const auto& shape = batch.tokens.shape();
  if (produces_loss_ && (shape.size() != 2 || batch.targets.shape() != shape))
    throw std::runtime_error("a batch must hold tokens and targets of one shape [batch, seq]");
  if (!produces_loss_ && shape.size() < 2)
    throw std::runtime_error("an encoder's batch must hold its input as [batch, seq, ...], got " +
                             shape_string(shape));
  if (shape[1] > settings_.seq_length)
    throw std::runtime_error("sequence of " + std::to_string(shape[1]) +
                             " tokens is longer than model.seq_length (" +
                             std::to_string(settings_.seq_length) + ")");
  if (sequence_parallel_ && shape[1] % tensor_group_->size() != 0)
    throw std::runtime_error("sequence parallelism over " + std::to_string(tensor_group_->size()) +
                             " tp ranks cannot cut a sequence of " + std::to_string(shape[1]) + " tokens");
  const Chunk& chunk = chunks_.at(chunk_index);
  auto run = std::make_unique<Run>();
  run->chunk = &chunk;
  run->training = training;
  run->microbatch = microbatch;
  run->batch_shape[0] = shape[0];
  run->batch_shape[1] = shape[1];
  run->profile = training ? profile_ : nullptr;
  if (chunk.embedding) run->tokens = batch.tokens.to(device_);
  if (chunk.head && produces_loss_) run->targets = batch.targets.to(device_);
  if (chunk.embedding) find_splice_positions(*run, batch);
  run->loss_scale = Tensor({1}, plx_dtype_f32(), device_);
  run->loss_scale_value = loss_scale;
  const auto scale = static_cast<float>(loss_scale);
  device_ops::write_floats(run->loss_scale, &scale, 1);
  run->states.resize(units_.size());
  run->outputs.resize(units_.size());
  run->grad_inputs.resize(units_.size());
  run->weights.assign(units_.size(), WeightGrads::with_backward);
  for (std::size_t u = chunk.first_unit; u < chunk.end_unit; ++u)
    run->states[u] = units_[u]->layer->create_state(microbatch);
  run->connection = connection_->start({shape[0], stream_seq(shape[1]), microbatch, training, run->profile});
  if (chunk.head && !chunk.mtp.empty()) start_mtp(*run, batch);
  run->ledger = residency_->start_microbatch();
  run->forward_unit = chunk.first_unit;
  run->backward_unit = static_cast<int64_t>(chunk.end_unit) - 1;
  run->backward_stage = units_[chunk.end_unit - 1]->num_stages() - 1;
  return run;
}

void Model::forward_stage(Run& run, std::size_t u, uint32_t stage) {
  if (u >= units_.size()) throw std::runtime_error("forward of unit " + std::to_string(u) + ": no such unit");
  if (link_ && stage == 0 && u == run.chunk->first_unit && !run.chunk->embedding && !run.input_set &&
      run.forward_unit == u)
    take_received_input(run);
  check_forward_order(run, u, stage);
  Unit& unit = *units_[u];
  if (stage == 0) residency_->acquire_for_forward(u, run.profile);
  const StepProfile::Scope timed(run.profile, unit.label, StepProfile::Phase::forward);
  const Timeline::Scope span(run.training ? timeline_ : nullptr, unit.label, "forward", run.microbatch,
                             run.chunk->index);
  const std::vector<DLTensor> inputs = forward_inputs(run, u, stage);
  if (stage == 0) run.outputs[u] = allocate_outputs(unit, inputs, settings_.activation_dtype, device_);
  call_forward(unit, params_, *run.states[u], stage, {run.microbatch, run.training}, inputs, run.outputs[u]);
  if (stage + 1 < unit.num_stages()) {
    ++run.forward_stage;
    return;
  }
  run.forward_stage = 0;
  ++run.forward_unit;
  check_output_finite(unit, run.outputs[u], run.microbatch);
  fold_forward(run, u);
  residency_->release_after_forward(u);
  if (run.training && run.forward_complete()) note_in_flight();
}

void Model::take_received_input(Run& run) {
  const Timeline::Scope span(run.training ? timeline_ : nullptr, "wait: input", "comm", run.microbatch,
                             run.chunk->index);
  connection_->set_stream(*run.connection,
                          link_->take(PipelineLink::Direction::forward, run.chunk->index, run.microbatch));
  run.input_set = true;
}

void Model::take_received_output_grad(Run& run) {
  const Timeline::Scope span(timeline_, "wait: output gradient", "comm", run.microbatch, run.chunk->index);
  connection_->set_grad(*run.connection,
                        link_->take(PipelineLink::Direction::backward, run.chunk->index, run.microbatch));
  run.output_grad_set = true;
}

// What a pipeline schedule keeps alive: microbatches whose forward is done and backward is not.
void Model::note_in_flight() {
  std::size_t in_flight = 0;
  for (const auto& chunk_runs : runs_)
    for (const auto& r : chunk_runs)
      if (r->forward_complete() && !r->backward_complete()) ++in_flight;
  peak_in_flight_ = std::max(peak_in_flight_, in_flight);
}

// A unit's inputs at each of its stages: the tokens; the connection's input to F; the stream's
// end for the final norm; the final norm's output and the targets for the head.
std::vector<DLTensor> Model::forward_inputs(Run& run, std::size_t u, uint32_t stage) {
  const bool first_stage = stage == 0;
  switch (units_[u]->role) {
    case UnitRole::embedding:
      return {run.tokens.view()};
    case UnitRole::decoder:
      return {connection_->layer_input(stream_of(run, u), u, first_stage).view()};
    case UnitRole::final_norm:
    case UnitRole::mtp_norm:
      return {connection_->leave(stream_of(run, u), first_stage).view()};
    case UnitRole::head:
      if (!produces_loss_) return {run.outputs[u - 1][0].view()};  // an encoder's output layer
      return {run.outputs[u - 1][0].view(), targets_of(run, u).view()};
    case UnitRole::mtp_head:
      return {run.outputs[u - 1][0].view(), targets_of(run, u).view()};
    case UnitRole::mtp_embedding:
      return {run.mtp_tokens[depth_index(u)].view()};
    case UnitRole::mtp_entry: {
      const std::size_t d = depth_index(u);
      return {run.outputs[run.chunk->mtp[d].embedding][0].view(), hidden_before(run, d).view()};
    }
  }
  return {};
}

// After a unit's last forward stage: its output into the stream, or the loss.
void Model::fold_forward(Run& run, std::size_t u) {
  std::vector<Tensor>& outputs = run.outputs[u];
  switch (units_[u]->role) {
    case UnitRole::embedding:
      splice_forward(run, outputs[0]);
      connection_->enter(*run.connection, std::move(outputs[0]));
      outputs.clear();
      break;
    case UnitRole::decoder:
      connection_->fold(stream_of(run, u), u, std::move(outputs[0]));
      outputs.clear();  // F's output is folded into the stream; free it now
      break;
    case UnitRole::final_norm:
    case UnitRole::mtp_norm:
      break;  // the head reads it, and the next MTP depth's entry
    case UnitRole::head:
      if (produces_loss_) run.loss = device_ops::read_scalar(outputs[0]);
      break;  // an encoder's output stays for take_chunk_output
    case UnitRole::mtp_embedding:
      break;  // the entry reads it
    case UnitRole::mtp_entry: {
      connection_->enter(stream_of(run, u), std::move(outputs[0]));
      outputs.clear();
      run.outputs[run.chunk->mtp[depth_index(u)].embedding].clear();
      break;
    }
    case UnitRole::mtp_head:
      run.mtp_losses[depth_index(u)] = device_ops::read_scalar(outputs[0]);
      break;
  }
}

void Model::backward_stage(Run& run, std::size_t u, uint32_t stage) {
  if (link_ && run.training && u + 1 == run.chunk->end_unit && !run.chunk->head && !run.output_grad_set &&
      run.forward_complete() && run.backward_unit == static_cast<int64_t>(u) &&
      stage + 1 == units_[u]->num_stages())
    take_received_output_grad(run);
  check_backward_order(run, u, stage);
  check_output_grad(run, u, produces_loss_);
  Unit& unit = *units_[u];
  const bool first_stage = stage + 1 == unit.num_stages();  // backward runs a unit's stages last to first
  if (first_stage) residency_->acquire_for_backward(u, profile_);
  const StepProfile::Scope timed(profile_, unit.label, StepProfile::Phase::backward);
  const Timeline::Scope span(timeline_, unit.label, "backward", run.microbatch, run.chunk->index);
  std::vector<DLTensor> grad_outputs, grad_inputs;
  backward_tensors(run, u, first_stage, grad_outputs, grad_inputs);
  const bool split = split_weights_ && unit.layer->has_backward_weights();
  call_backward(unit, params_, *run.states[u], stage, {run.microbatch, run.loss_scale_value, split},
                grad_outputs, grad_inputs);
  if (stage > 0) {
    --run.backward_stage;
    return;
  }
  fold_backward(run, u);
  --run.backward_unit;
  if (!run.backward_complete()) run.backward_stage = units_[run.backward_unit]->num_stages() - 1;
  if (split) {
    run.weights[u] = WeightGrads::due;  // the state holds what backward_weights needs
    return;
  }
  finish_unit_backward(run, u);
}

// After a unit's last backward stage: its input gradient into the stream's gradient, and what it
// no longer needs freed.
// A unit's backward arguments: the gradients of its outputs (the loss's scale for a head) and
// the buffers its inputs' gradients are written into (absent for token ids and targets).
void Model::backward_tensors(Run& run, std::size_t u, bool first_stage, std::vector<DLTensor>& grad_outputs,
                             std::vector<DLTensor>& grad_inputs) {
  const Unit& unit = *units_[u];
  Tensor& written = run.grad_inputs[u];
  const auto written_like = [&](const Tensor& like) {
    if (written.empty()) written = Tensor(like.shape(), like.dtype(), device_);
    return written.view();
  };
  switch (unit.role) {
    case UnitRole::head:
      if (!produces_loss_) {  // an encoder's output layer: the gradient of its output
        grad_outputs = {run.output_grad.view()};
        for (uint32_t o = 1; o < unit.num_outputs; ++o) grad_outputs.push_back(absent(run.outputs[u][o]));
        grad_inputs = {written_like(run.outputs[u - 1][0])};
        break;
      }
      [[fallthrough]];
    case UnitRole::mtp_head:
      grad_outputs = {(unit.role == UnitRole::head ? run.loss_scale : run.mtp_loss_scale).view()};
      for (uint32_t o = 1; o < unit.num_outputs; ++o) grad_outputs.push_back(absent(run.outputs[u][o]));
      grad_inputs = {written_like(run.outputs[u - 1][0]), absent(targets_of(run, u))};
      break;
    case UnitRole::final_norm:
    case UnitRole::mtp_norm:
      grad_outputs = {run.grad_inputs[u + 1].view()};
      grad_inputs = {written_like(connection_->leave(stream_of(run, u), false))};
      break;
    case UnitRole::decoder: {
      const Tensor& df = connection_->layer_output_grad(stream_of(run, u), u, first_stage);
      grad_outputs = {df.view()};
      grad_inputs = {written_like(df)};
      break;
    }
    case UnitRole::embedding: {
      const Tensor& grad = connection_->enter_backward(*run.connection, first_stage);
      if (first_stage) splice_backward(run, grad);
      grad_outputs = {grad.view()};
      grad_inputs = {absent(run.tokens)};
      break;
    }
    case UnitRole::mtp_entry: {
      const std::size_t d = depth_index(u);
      const Tensor& dz = connection_->enter_backward(stream_of(run, u), first_stage);
      grad_outputs = {dz.view()};
      for (Tensor* grad : {&run.mtp_embedding_grads[d], &run.mtp_hidden_grads[d]})
        if (grad->empty()) *grad = Tensor(dz.shape(), dz.dtype(), device_);
      grad_inputs = {run.mtp_embedding_grads[d].view(), run.mtp_hidden_grads[d].view()};
      break;
    }
    case UnitRole::mtp_embedding:
      grad_outputs = {run.mtp_embedding_grads[depth_index(u)].view()};
      grad_inputs = {absent(run.mtp_tokens[depth_index(u)])};
      break;
  }
}

void Model::fold_backward(Run& run, std::size_t u) {
  switch (units_[u]->role) {
    case UnitRole::head:
    case UnitRole::mtp_head: {
      run.outputs[u].clear();
      // The norm before this head also feeds the next MTP depth's entry, whose backward ran
      // before: its gradient adds to the head's.
      const std::size_t next = units_[u]->role == UnitRole::head ? 0 : depth_index(u) + 1;
      if (next < run.mtp_hidden_grads.size()) {
        device_ops::add_into(run.grad_inputs[u], run.mtp_hidden_grads[next]);
        run.mtp_hidden_grads[next] = Tensor();
      }
      break;
    }
    case UnitRole::final_norm:
    case UnitRole::mtp_norm:
      connection_->leave_backward(stream_of(run, u), std::move(run.grad_inputs[u]));
      run.outputs[u].clear();
      break;
    case UnitRole::decoder:
      connection_->fold_backward(stream_of(run, u), u, std::move(run.grad_inputs[u]));
      break;
    case UnitRole::mtp_embedding:
      run.mtp_embedding_grads[depth_index(u)] = Tensor();
      break;
    case UnitRole::embedding:
    case UnitRole::mtp_entry:
      break;
  }
}

// ---- multi-token prediction ----

// A microbatch's MTP inputs on the chunk holding the head: for depth k the tokens and targets
// rolled k places to the left (mtp_inputs.hpp; the batch's own when it carries them, rolled on
// whole sequences before a context-parallel cut), a stream of its own, and the scale of its
// loss's gradient.
void Model::start_mtp(Run& run, const Batch& batch) {
  const std::size_t depths = run.chunk->mtp.size();
  const bool given = !batch.mtp_tokens.empty();
  if (given && (batch.mtp_tokens.size() != depths || batch.mtp_targets.size() != depths))
    throw std::invalid_argument(
        "the batch carries the rolled inputs of " + std::to_string(batch.mtp_tokens.size()) +
        " multi-token prediction depths and " + std::to_string(batch.mtp_targets.size()) +
        " depths' targets; the model has " + std::to_string(depths));
  const Tensor tokens = batch.tokens.to(DLDevice{kDLCPU, 0});
  const Tensor targets = batch.targets.to(DLDevice{kDLCPU, 0});
  const int64_t rows = run.batch_shape[0], seq = run.batch_shape[1];
  for (std::size_t d = 1; d <= depths; ++d) {
    if (given) {
      run.mtp_tokens.push_back(batch.mtp_tokens[d - 1].to(device_));
      run.mtp_targets.push_back(batch.mtp_targets[d - 1].to(device_));
    } else {
      Tensor rolled_tokens({rows, seq}, plx_dtype_i32()), rolled_targets({rows, seq}, plx_dtype_i32());
      roll_for_mtp_depth(tokens, targets, static_cast<uint32_t>(d), rolled_tokens, rolled_targets);
      run.mtp_tokens.push_back(rolled_tokens.to(device_));
      run.mtp_targets.push_back(rolled_targets.to(device_));
    }
    run.mtp_connections.push_back(
        connection_->start({rows, stream_seq(seq), run.microbatch, run.training, run.profile}));
  }
  run.mtp_embedding_grads.resize(depths);
  run.mtp_hidden_grads.resize(depths);
  run.mtp_losses.assign(depths, 0.0);
  run.mtp_loss_scale = Tensor({1}, plx_dtype_f32(), device_);
  const auto scale = static_cast<float>(run.loss_scale_value * settings_.mtp_loss_scaling_factor /
                                        static_cast<double>(depths));
  device_ops::write_floats(run.mtp_loss_scale, &scale, 1);
}

const Tensor& Model::targets_of(const Run& run, std::size_t u) const {
  return units_[u]->mtp_depth == 0 ? run.targets : run.mtp_targets[depth_index(u)];
}

std::size_t Model::depth_index(std::size_t u) const {
  return static_cast<std::size_t>(units_[u]->mtp_depth) - 1;
}

ConnectionState& Model::stream_of(Run& run, std::size_t u) const {
  const uint32_t depth = units_[u]->mtp_depth;
  return depth == 0 ? *run.connection : *run.mtp_connections[depth - 1];
}

// What MTP depth d + 1 (0-based d) reads beside its rolled tokens: the main model's hidden states
// after the final norm for the first depth (Megatron's), the depth before's after its own norm.
const Tensor& Model::hidden_before(const Run& run, std::size_t d) const {
  const std::size_t unit = d == 0 ? run.chunk->final_norm_unit : run.chunk->mtp[d - 1].norm;
  return run.outputs[unit].at(0);
}

// A unit's weight gradients, after its backward left them out. Another microbatch's stages may
// have run since; this one's layer state and the unit's gradient buffers were kept for it.
void Model::backward_weights(Run& run, std::size_t u) {
  Unit& unit = *units_.at(u);
  const std::string where =
      "backward_weights of microbatch " + std::to_string(run.microbatch) + ", " + unit.label;
  if (run.backward_unit >= static_cast<int64_t>(u))
    throw std::runtime_error("schedule order: " + where + " ran before the unit's backward completed");
  switch (run.weights[u]) {
    case WeightGrads::with_backward:
      return;  // its backward computed them
    case WeightGrads::done:
      throw std::runtime_error("schedule order: " + where + " ran twice");
    case WeightGrads::due:
      break;
  }
  const StepProfile::Scope timed(profile_, unit.label, StepProfile::Phase::backward);
  const Timeline::Scope span(timeline_, unit.label + " (weights)", "backward", run.microbatch,
                             run.chunk->index);
  call_backward_weights(unit, params_, *run.states[u], run.microbatch, run.loss_scale_value);
  run.weights[u] = WeightGrads::done;
  finish_unit_backward(run, u);
}

// After a unit's backward, or its weight gradients when they came apart: its layer state goes,
// and its part of the microbatch's gradients is complete.
void Model::finish_unit_backward(Run& run, std::size_t u) {
  run.states[u].reset();
  residency_->gradients_complete(run.ledger, u, profile_);
}

// One batch forward through every chunk of this rank in order; pipelined, each chunk's input
// comes from the previous stage and its output goes on, so every stage runs this together.
std::unique_ptr<Model::Run> Model::forward_only(const Batch& batch) {
  if (!link_) (void)whole_model_chunk("forward");
  std::unique_ptr<Run> head;
  try {
    for (uint32_t c = 0; c < chunks_.size(); ++c) {
      const Chunk& chunk = chunks_[c];
      auto run = start_run(c, batch, false, 0, 1.0);
      if (link_ && !chunk.embedding) {
        const auto& shape = batch.tokens.shape();
        link_->receive(PipelineLink::Direction::forward, chunk.index, 0, 1,
                       connection_->stream_shape(shape[0], stream_seq(shape[1])), settings_.activation_dtype,
                       device_);
      }
      // Evaluation and sampling read the main head: the MTP depths after it are not run.
      const std::size_t end = chunk.head ? chunk.head_unit + 1 : chunk.end_unit;
      for (std::size_t u = chunk.first_unit; u < end; ++u)
        for (uint32_t s = 0; s < units_[u]->num_stages(); ++s) forward_stage(*run, u, s);
      if (chunk.head)
        head = std::move(run);
      else
        link_->send(PipelineLink::Direction::forward, chunk.index, 0, 1,
                    connection_->take_stream(*run->connection));
    }
    if (link_) link_->finish();
  } catch (...) {
    if (link_) link_->abandon();
    throw;
  }
  return head;
}

double Model::evaluate(const Batch& batch) {
  const std::unique_ptr<Run> head = forward_only(batch);
  return head ? head->loss : 0.0;
}

std::vector<float> Model::next_token_logits(const Batch& batch, int64_t position) {
  const std::unique_ptr<Run> head = forward_only(batch);
  const auto vocab = static_cast<std::size_t>(settings_.vocab_size);
  std::vector<float> row(vocab);
  if (head) {
    const std::size_t unit = head->chunk->head_unit;
    const Tensor& logits = head->outputs[unit].at(1);  // head output 1: [B, S, V] (tp: its share of V)
    if (!plx_dtype_equal(logits.dtype(), plx_dtype_f32()))
      throw std::runtime_error(units_[unit]->label + ": sampling reads float32 logits (head output 1), got " +
                               dtype_name(logits.dtype()));
    const int64_t columns = logits.shape().back();
    std::vector<float> local(static_cast<std::size_t>(columns));
    device::copy(local.data(), DLDevice{kDLCPU, 0}, logits.data<float>() + position * columns,
                 logits.device(), local.size() * sizeof(float));
    std::vector<float> whole = vocabulary_row(unit, std::move(local));
    // The padded rows (model.make_vocab_size_divisible_by) are no token: never sampled.
    std::copy(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(vocab), row.begin());
  }
  if (link_) {  // the last stage holds the head: every stage samples the same token from its logits
    const Tensor shared = Tensor::borrowed(row.data(), {static_cast<int64_t>(row.size())}, plx_dtype_f32(),
                                           DLDevice{kDLCPU, 0});
    link_->group().broadcast(shared.view(), static_cast<int32_t>(link_->size() - 1));
  }
  return row;
}

// A row of logits over the padded vocabulary from the head's columns: under tensor parallelism a
// vocabulary-parallel head holds padded_vocab_size / tp of them, rank after rank (Megatron's
// VocabParallelEmbedding split), gathered here; a head that is not split holds them all.
std::vector<float> Model::vocabulary_row(std::size_t head_unit, std::vector<float> local) const {
  const auto padded = static_cast<std::size_t>(settings_.padded_vocab_size);
  if (local.size() == padded) return local;
  const auto t = static_cast<std::size_t>(tensor_group_ != nullptr ? tensor_group_->size() : 1);
  if (t == 1 || local.size() * t != padded)
    throw std::runtime_error(units_[head_unit]->label + ": its logits have " + std::to_string(local.size()) +
                             " columns; expected the padded vocabulary (" + std::to_string(padded) + ")" +
                             (t > 1 ? " or its share on one of " + std::to_string(t) + " tp ranks" : ""));
  std::vector<float> whole(padded);
  const auto cpu = DLDevice{kDLCPU, 0};
  const Tensor mine =
      Tensor::borrowed(local.data(), {static_cast<int64_t>(local.size())}, plx_dtype_f32(), cpu);
  const Tensor all = Tensor::borrowed(whole.data(), {static_cast<int64_t>(padded)}, plx_dtype_f32(), cpu);
  tensor_group_->all_gather(mine.view(), all.view());
  return whole;
}

const Model::Chunk& Model::whole_model_chunk(const char* what) const {
  if (chunks_.size() != 1 || !chunks_[0].embedding || !chunks_[0].head)
    throw std::runtime_error(
        std::string(what) + " runs a model of one chunk holding the whole model; this one holds " +
        std::to_string(chunks_.size()) + " chunk(s) of it (a pipeline schedule drives them)");
  return chunks_[0];
}

void Model::check_gradients_finite() const {
  // Every gradient searched at once (one read-back on a GPU), then the first, in forward order.
  std::vector<const Tensor*> grads;
  std::vector<std::pair<const Unit*, std::size_t>> owners;
  for (const auto& unit : units_)
    for (std::size_t i : unit->params) {
      if (params_[i].is_buffer()) continue;  // no gradient
      grads.push_back(&params_[i].grad);
      owners.emplace_back(unit.get(), i);
    }
  const std::vector<int64_t> first = device_ops::first_non_finite_each(grads);
  for (std::size_t k = 0; k < first.size(); ++k)
    if (first[k] >= 0)
      throw NonFiniteError("non-finite gradient of " + params_[owners[k].second].name + " (element " +
                           std::to_string(first[k]) + ") in " + owners[k].first->label +
                           ": the first layer with one, in forward order");
}

bool Model::has_after_step() const {
  for (const auto& unit : units_)
    if (unit->layer->has_after_step()) return true;
  return false;
}

void Model::after_step(int64_t step) {
  for (const auto& unit : units_) {
    // Under a data-parallel strategy only buffers stay whole outside a unit's window; the other
    // views are empty (data NULL), as plx_step_args says.
    refresh_views(*unit, params_);
    std::vector<DLTensor> params = unit->param_views;  // the layer may write its buffers through them
    unit->layer->after_step(step, params);
  }
}

}  // namespace plexus

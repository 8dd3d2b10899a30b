// Running the model: the stages of one microbatch, in the order a scheduler chooses.
//
// Dataflow of a microbatch (stream = the residual stream, owned here):
//   embedding(tokens) -> stream;  for each decoder sublayer F: stream += F(stream);
//   final_norm(stream) -> y;  head(y, targets) -> loss, logits.
// Backward runs the same chain in reverse: g = d(final_norm); for each F reversed:
// g += F'(g) (the residual's identity path plus the sublayer's gradient); embedding(g).
#include <cmath>
#include <string>

#include "engine/device_ops.hpp"
#include "engine/model_internal.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/step_profile.hpp"

namespace plexus {
namespace {

Tensor tensor_like(const plx_tensor_desc& desc, DLDevice device) {
  return Tensor(std::vector<int64_t>(desc.dims, desc.dims + desc.ndim), desc.dtype, device);
}

plx_tensor_desc desc_of(const Tensor& t) {
  plx_tensor_desc d{};
  d.ndim = static_cast<uint32_t>(t.shape().size());
  d.dtype = t.dtype();
  for (uint32_t i = 0; i < d.ndim; ++i) d.dims[i] = t.shape()[i];
  return d;
}

// The first non-finite value's index, or -1.
int64_t first_non_finite(const Tensor& t) {
  return device_ops::first_non_finite(t);
}

// The step-profile part of the mHC streams' own work: the copies after the embedding, the mean
// before the final norm, and their adjoints.
const std::string& mhc_streams_part() {
  static const std::string name = "mHC streams (expand, mean, adjoints)";
  return name;
}

DLTensor absent(const Tensor& like) {
  DLTensor view = like.view();
  view.data = nullptr;  // "no gradient needed" per the layer contract
  return view;
}

void add_into(Tensor& into, const Tensor& from) {
  device_ops::add_into(into, from);
}

}  // namespace

std::unique_ptr<Model::Run> Model::start_run(const Batch& batch, bool training, uint32_t microbatch,
                                             double loss_scale) {
  const auto& shape = batch.tokens.shape();
  if (shape.size() != 2 || batch.targets.shape() != shape)
    throw std::runtime_error("a batch must hold tokens and targets of one shape [batch, seq]");
  if (shape[1] > settings_.seq_length)
    throw std::runtime_error("sequence of " + std::to_string(shape[1]) +
                             " tokens is longer than model.seq_length (" +
                             std::to_string(settings_.seq_length) + ")");
  auto run = std::make_unique<Run>();
  run->batch = &batch;
  run->training = training;
  run->microbatch = microbatch;
  run->tokens = batch.tokens.to(device_);
  run->targets = batch.targets.to(device_);
  run->loss_scale = Tensor({1}, plx_dtype_f32(), device_);
  run->loss_scale_value = loss_scale;
  const auto scale = static_cast<float>(loss_scale);
  device_ops::write_floats(run->loss_scale, &scale, 1);
  run->outputs.resize(units_.size());
  run->grad_inputs.resize(units_.size());
  run->weights.assign(units_.size(), WeightGrads::with_backward);
  for (const auto& unit : units_) run->states.push_back(unit->layer->create_state(microbatch));
  if (mhc_backend_) run->mhc.resize(units_.size());
  run->backward_unit = static_cast<int64_t>(units_.size()) - 1;
  run->backward_stage = static_cast<uint32_t>(units_.back()->stages.size()) - 1;
  return run;
}

void Model::forward_stage(Run& run, uint32_t u, uint32_t stage) {
  if (u >= units_.size()) throw std::runtime_error("forward of unit " + std::to_string(u) + ": no such unit");
  Unit& unit = *units_[u];
  if (run.finished_forward || u != run.forward_unit || stage != run.forward_stage)
    throw std::runtime_error("schedule order: forward of microbatch " + std::to_string(run.microbatch) +
                             ", unit " + std::to_string(u) + " stage " + std::to_string(stage) +
                             " ran before forward unit " + std::to_string(run.forward_unit) + " stage " +
                             std::to_string(run.forward_stage));
  using Phase = StepProfile::Phase;
  StepProfile* const profile = run.training ? profile_ : nullptr;
  if (sharded_ && stage == 0 && fsdp_first_[u]) {
    const StepProfile::Scope gather(profile, "parameter gather (wait)", Phase::forward);
    const std::size_t f = fsdp_of_[u];
    sharded_->begin_forward(f);
    if (f + 1 < sharded_->num_units()) sharded_->prefetch_forward(f + 1);
  }
  const StepProfile::Scope timed(profile, unit.label, Phase::forward);
  std::vector<DLTensor> inputs;
  switch (unit.role) {
    case UnitRole::embedding:
      inputs = {run.tokens.view()};
      break;
    case UnitRole::decoder:
      if (unit.mhc && stage == 0) {
        const StepProfile::Scope connection(profile, unit.mhc->label, Phase::forward);
        inputs = {MhcStep::before_forward(*this, run, u).view()};
      } else {
        inputs = {(unit.mhc ? run.mhc[u].u : run.stream).view()};
      }
      break;
    case UnitRole::final_norm:
      if (mhc_backend_ && stage == 0) {
        const StepProfile::Scope streams(profile, mhc_streams_part(), Phase::forward);
        inputs = {MhcStep::contract(*this, run).view()};
      } else {
        inputs = {(mhc_backend_ ? run.contracted : run.stream).view()};
      }
      break;
    case UnitRole::head:
      inputs = {run.outputs[u - 1][0].view(), run.targets.view()};
      break;
  }
  std::vector<Tensor>& outputs = run.outputs[u];
  if (stage == 0) {
    std::vector<plx_tensor_desc> in_descs;
    for (const DLTensor& t : inputs) {
      plx_tensor_desc d{};
      d.ndim = static_cast<uint32_t>(t.ndim);
      d.dtype = t.dtype;
      for (int i = 0; i < t.ndim; ++i) d.dims[i] = t.shape[i];
      in_descs.push_back(d);
    }
    outputs.clear();
    for (plx_tensor_desc d : unit.layer->output_desc(in_descs)) {
      // The embedding's input is integer, so its output has no dtype to follow: the model's
      // activation dtype (run.precision) is chosen here, and every later unit follows its input.
      if (unit.role == UnitRole::embedding && outputs.empty()) d.dtype = settings_.activation_dtype;
      outputs.push_back(tensor_like(d, device_));
    }
  }
  std::vector<DLTensor> out_views;
  for (const Tensor& t : outputs) out_views.push_back(t.view());
  plx_forward_args args{};
  args.struct_size = sizeof(args);
  args.microbatch = run.microbatch;
  args.flags = run.training ? PLX_FORWARD_TRAINING : 0u;
  args.num_inputs = static_cast<uint32_t>(inputs.size());
  args.inputs = inputs.data();
  args.num_outputs = static_cast<uint32_t>(out_views.size());
  args.outputs = out_views.data();
  refresh_views(unit);
  args.num_params = static_cast<uint32_t>(unit.param_views.size());
  args.params = unit.param_views.data();
  unit.layer->forward(*run.states[u], stage, args);

  if (stage + 1 < unit.stages.size()) {
    ++run.forward_stage;
    return;
  }
  run.forward_stage = 0;
  ++run.forward_unit;
  if (const int64_t bad = first_non_finite(outputs[0]); bad >= 0)
    throw NonFiniteError("non-finite value in the output of " + unit.label + " (element " +
                         std::to_string(bad) + ", microbatch " + std::to_string(run.microbatch) +
                         "): the first layer that produced one");
  switch (unit.role) {
    case UnitRole::embedding:
      if (mhc_backend_) {
        const StepProfile::Scope streams(profile, mhc_streams_part(), Phase::forward);
        MhcStep::expand(*this, run, outputs[0]);
        outputs.clear();
      } else {
        run.stream = std::move(outputs[0]);
      }
      break;
    case UnitRole::decoder:
      if (unit.mhc) {
        const StepProfile::Scope connection(profile, unit.mhc->label, Phase::forward);
        MhcStep::after_forward(*this, run, u, std::move(outputs[0]));
        run.mhc[u].u = Tensor();  // F has what it needs for its backward
      } else {
        add_into(run.stream, outputs[0]);
      }
      outputs.clear();  // F's output is folded into the stream; free it now
      break;
    case UnitRole::final_norm:
      break;
    case UnitRole::head:
      run.loss = device_ops::read_scalar(outputs[0]);
      run.finished_forward = true;
      break;
  }
  if (sharded_ && fsdp_last_[u]) sharded_->end_forward(fsdp_of_[u]);
}

// The layers' views of their parameters and gradients, taken again before every call: under a
// data-parallel strategy the store's tensors point into buffers that change between calls.
void Model::refresh_views(Unit& unit) {
  for (std::size_t k = 0; k < unit.params.size(); ++k) {
    unit.param_views[k] = params_[unit.params[k]].value.view();
    unit.grad_views[k] = params_[unit.params[k]].grad.view();
  }
}

void Model::backward_stage(Run& run, uint32_t u, uint32_t stage) {
  if (!run.training)
    throw std::runtime_error("backward of a microbatch whose forward was not a training forward");
  if (!run.finished_forward || static_cast<int64_t>(u) != run.backward_unit || stage != run.backward_stage)
    throw std::runtime_error("schedule order: backward of microbatch " + std::to_string(run.microbatch) +
                             ", unit " + std::to_string(u) + " stage " + std::to_string(stage) +
                             " ran out of order (expected unit " + std::to_string(run.backward_unit) +
                             " stage " + std::to_string(run.backward_stage) +
                             (run.finished_forward ? ")" : ", after its forward completes)"));
  Unit& unit = *units_[u];
  using Phase = StepProfile::Phase;
  if (sharded_ && stage + 1 == unit.stages.size() && fsdp_last_[u]) {
    const StepProfile::Scope gather(profile_, "parameter gather (wait)", Phase::backward);
    const std::size_t f = fsdp_of_[u];
    sharded_->begin_backward(f);
    if (f > 0) sharded_->prefetch_backward(f - 1);
  }
  const StepProfile::Scope timed(profile_, unit.label, Phase::backward);
  std::vector<DLTensor> grad_outputs;
  std::vector<DLTensor> grad_inputs;
  Tensor& written = run.grad_inputs[u];
  switch (unit.role) {
    case UnitRole::head: {
      const Tensor& y = run.outputs[u - 1][0];
      if (written.empty()) written = Tensor(y.shape(), y.dtype(), device_);
      grad_outputs = {run.loss_scale.view()};
      for (uint32_t o = 1; o < unit.num_outputs; ++o) grad_outputs.push_back(absent(run.outputs[u][o]));
      grad_inputs = {written.view(), absent(run.targets)};
      break;
    }
    case UnitRole::final_norm: {
      const Tensor& input = mhc_backend_ ? run.contracted : run.stream;
      if (written.empty()) written = Tensor(input.shape(), input.dtype(), device_);
      grad_outputs = {run.grad_inputs[u + 1].view()};
      grad_inputs = {written.view()};
      break;
    }
    case UnitRole::decoder:
      if (unit.mhc) {
        if (stage + 1 == unit.stages.size()) {  // the unit's first backward stage
          const StepProfile::Scope connection(profile_, unit.mhc->label, Phase::backward);
          MhcStep::before_backward(*this, run, u);  // post_res backward: fills run.mhc[u].df
        }
        const Tensor& df = run.mhc[u].df;
        if (written.empty()) written = Tensor(df.shape(), df.dtype(), device_);
        grad_outputs = {df.view()};
      } else {
        if (written.empty()) written = Tensor(run.grad.shape(), run.grad.dtype(), device_);
        grad_outputs = {run.grad.view()};
      }
      grad_inputs = {written.view()};
      break;
    case UnitRole::embedding:
      if (mhc_backend_ && stage + 1 == unit.stages.size()) {
        const StepProfile::Scope streams(profile_, mhc_streams_part(), Phase::backward);
        run.summed_grad = MhcStep::embedding_grad(*this, run);
      }
      grad_outputs = {(mhc_backend_ ? run.summed_grad : run.grad).view()};
      grad_inputs = {absent(run.tokens)};
      break;
  }
  plx_backward_args args{};
  args.struct_size = sizeof(args);
  args.microbatch = run.microbatch;
  args.num_outputs = static_cast<uint32_t>(grad_outputs.size());
  args.grad_outputs = grad_outputs.data();
  args.num_inputs = static_cast<uint32_t>(grad_inputs.size());
  args.grad_inputs = grad_inputs.data();
  refresh_views(unit);
  args.num_params = static_cast<uint32_t>(unit.param_views.size());
  args.params = unit.param_views.data();
  args.param_grads = unit.grad_views.data();
  args.loss_scale = run.loss_scale_value;
  const bool split = split_weights_ && unit.layer->has_backward_weights();
  if (split) args.flags = PLX_BACKWARD_SKIP_WEIGHT_GRADS;
  unit.layer->backward(*run.states[u], stage, args);

  if (stage > 0) {
    --run.backward_stage;
    return;
  }
  // The unit's backward is complete: route its gradient and free what it no longer needs.
  switch (unit.role) {
    case UnitRole::head:
      run.outputs[u].clear();
      break;
    case UnitRole::final_norm:
      if (mhc_backend_) {
        const StepProfile::Scope streams(profile_, mhc_streams_part(), Phase::backward);
        MhcStep::spread(*this, run, written);
      } else
        run.grad = std::move(written);
      run.outputs[u].clear();
      break;
    case UnitRole::decoder:
      if (unit.mhc) {
        const StepProfile::Scope connection(profile_, unit.mhc->label, Phase::backward);
        MhcStep::after_backward(*this, run, u, std::move(written));
      } else
        add_into(run.grad, written);
      break;
    case UnitRole::embedding:
      break;
  }
  --run.backward_unit;
  if (run.backward_unit >= 0)
    run.backward_stage = static_cast<uint32_t>(units_[run.backward_unit]->stages.size()) - 1;
  if (split) {
    run.weights[u] = WeightGrads::due;  // the state holds what backward_weights needs
    return;
  }
  finish_unit_backward(run, u);
}

// A unit's weight gradients, after its backward left them out. Another microbatch's stages may
// have run since; this one's layer state and the unit's gradient buffers were kept for it.
void Model::backward_weights(Run& run, uint32_t u) {
  Unit& unit = *units_.at(u);
  const std::string where = "backward_weights of microbatch " + std::to_string(run.microbatch) + ", " + unit.label;
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
  plx_backward_args args{};
  args.struct_size = sizeof(args);
  args.microbatch = run.microbatch;
  refresh_views(unit);
  args.num_params = static_cast<uint32_t>(unit.param_views.size());
  args.params = unit.param_views.data();
  args.param_grads = unit.grad_views.data();
  args.loss_scale = run.loss_scale_value;
  unit.layer->backward_weights(*run.states[u], args);
  run.weights[u] = WeightGrads::done;
  finish_unit_backward(run, u);
}

// After a unit's backward, or its weight gradients when they came apart: its layer state goes,
// and the FSDP unit's gradients are complete once every physical unit of it is through both
// (its first unit's backward runs last; a delayed weight gradient may come later still).
void Model::finish_unit_backward(Run& run, uint32_t u) {
  run.states[u].reset();
  if (!sharded_) return;
  std::size_t first = u, last = u;
  while (!fsdp_first_[first]) --first;
  while (!fsdp_last_[last]) ++last;
  if (run.backward_unit >= static_cast<int64_t>(first)) return;  // its first unit's backward is to come
  for (std::size_t p = first; p <= last; ++p)
    if (run.weights[p] == WeightGrads::due) return;
  const StepProfile::Scope reduce(profile_, "gradient reduction (start)", StepProfile::Phase::backward);
  sharded_->end_backward(fsdp_of_[u]);
}

void Model::check_weight_gradients_done(const Run& run) const {
  for (std::size_t l = 0; l < logical_units_.size(); ++l)
    for (std::size_t u = logical_units_[l].first; u < logical_units_[l].first + logical_units_[l].count; ++u)
      if (run.weights[u] == WeightGrads::due)
        throw std::runtime_error("the scheduler asked for weight gradients apart (split_weight_gradients) but "
                                 "returned without calling backward_weights for microbatch " +
                                 std::to_string(run.microbatch) + " of unit " + std::to_string(l) + " (" +
                                 units_[u]->label + ")");
}

void Model::run_forward(Run& run) {
  for (uint32_t u = 0; u < units_.size(); ++u)
    for (uint32_t s = 0; s < units_[u]->stages.size(); ++s) forward_stage(run, u, s);
}

double Model::evaluate(const Batch& batch) {
  auto run = start_run(batch, false, 0, 1.0);
  run_forward(*run);
  return run->loss;
}

std::vector<float> Model::next_token_logits(const Batch& batch, int64_t position) {
  auto run = start_run(batch, false, 0, 1.0);
  run_forward(*run);
  const Tensor& logits = run->outputs.back().at(1);  // head output 1: [B, S, V]
  if (!plx_dtype_equal(logits.dtype(), plx_dtype_f32()))
    throw std::runtime_error(units_.back()->label + ": sampling reads float32 logits (head output 1), got " +
                             dtype_name(logits.dtype()));
  const int64_t vocab = logits.shape().back();
  std::vector<float> row(static_cast<std::size_t>(vocab));
  device::copy(row.data(), DLDevice{kDLCPU, 0}, logits.data<float>() + position * vocab, logits.device(),
               row.size() * sizeof(float));
  return row;
}

void Model::check_gradients_finite() const {
  for (const auto& unit : units_) {
    for (std::size_t i : unit->params) {
      if (params_[i].is_buffer()) continue;  // no gradient
      if (const int64_t bad = first_non_finite(params_[i].grad); bad >= 0)
        throw NonFiniteError("non-finite gradient of " + params_[i].name + " (element " +
                             std::to_string(bad) + ") in " + unit->label +
                             ": the first layer with one, in forward order");
    }
  }
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
    refresh_views(*unit);
    std::vector<DLTensor> params = unit->param_views;  // the layer may write its buffers through them
    unit->layer->after_step(step, params);
  }
}

namespace {

const char* role_word(UnitRole role) {
  switch (role) {
    case UnitRole::embedding: return "embedding";
    case UnitRole::final_norm: return "final norm";
    case UnitRole::head: return "head";
    case UnitRole::decoder: break;
  }
  return "decoder";
}

}  // namespace

std::vector<Model::UnitSummary> Model::summary() const {
  const int64_t s = settings_.seq_length;
  Tensor tokens({1, s}, plx_dtype_i32());
  Tensor hidden({1, s, settings_.hidden_size}, plx_dtype_f32());
  std::vector<UnitSummary> rows;
  for (const auto& unit : units_) {
    std::vector<plx_tensor_desc> inputs;
    switch (unit->role) {
      case UnitRole::embedding:
        inputs = {desc_of(tokens)};
        break;
      case UnitRole::head:
        inputs = {desc_of(hidden), desc_of(tokens)};
        break;
      default:
        inputs = {desc_of(hidden)};
        break;
    }
    UnitSummary row;
    row.label = unit->label;
    row.kind = role_word(unit->role);
    row.symbol = unit->symbol;
    row.component = unit->component;
    row.physical = unit->physical;
    row.logical = unit->logical;
    row.segment = unit->segment;
    for (std::size_t i : unit->gradient_params) row.parameters += params_[i].numel();
    if (const auto flops = unit->layer->estimate_flops(inputs))
      row.flops_per_token = (flops->forward + flops->backward) / static_cast<double>(s) +
                            (unit->mhc ? mhc_connection_flops_per_token() : 0.0);
    rows.push_back(std::move(row));
  }
  return rows;
}

// The matrix products of one mHC connection per token, 2 FLOPs per multiply-add, n streams of
// width C: the mapping projection of the flattened streams (nC x (n^2 + 2n)), the aggregation
// (n C), the residual mix H_res (n^2 C) and h_post times F's output (n C): n C (n + 1)(n + 2)
// multiply-adds. Backward computes two products for each (the input's and the weight's
// gradient), twice the forward. Sinkhorn's n x n iterations and the norms are not products.
double Model::mhc_connection_flops_per_token() const {
  const auto n = static_cast<double>(settings_.mhc.streams);
  const auto c = static_cast<double>(settings_.hidden_size);
  const double forward = 2 * n * c * (n + 1) * (n + 2);
  return 3 * forward;
}

std::optional<double> Model::flops_per_token() const {
  double total = 0;
  for (const UnitSummary& row : summary()) {
    if (!row.flops_per_token) return std::nullopt;
    total += *row.flops_per_token;
  }
  return total;
}

}  // namespace plexus

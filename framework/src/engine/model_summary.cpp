// What `plexus model show` and the trainer's FLOP rate read: per unit its numbers, parameters and
// FLOPs per token.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/model_internal.hpp"

namespace plexus {
namespace {

// The summary's kind of a row: "decoder" for a decoder layer (checkpoint tools select on it).
const char* role_word(UnitRole role) {
  return role == UnitRole::decoder ? "decoder" : role_name(role);
}

plx_tensor_desc desc_of(const std::vector<int64_t>& shape, DLDataType dtype) {
  plx_tensor_desc d{};
  d.ndim = static_cast<uint32_t>(shape.size());
  d.dtype = dtype;
  for (uint32_t i = 0; i < d.ndim; ++i) d.dims[i] = shape[i];
  return d;
}

plx_tensor_desc desc_of(const Tensor& t) {
  return desc_of(t.shape(), t.dtype());
}

}  // namespace

std::vector<Model::UnitSummary> Model::summary() const {
  const int64_t s = settings_.seq_length;
  Tensor tokens({1, s}, plx_dtype_i32());
  Tensor hidden({1, stream_seq(s), settings_.hidden_size}, plx_dtype_f32());  // as the stream holds it
  std::vector<UnitSummary> rows;
  for (const auto& unit : units_) {
    std::vector<plx_tensor_desc> inputs;
    switch (unit->role) {
      case UnitRole::embedding:
      case UnitRole::mtp_embedding:
        inputs = {desc_of(tokens)};
        break;
      case UnitRole::head:
      case UnitRole::mtp_head:
        // An encoder's head (its output layer) reads the final norm's output only.
        inputs = produces_loss_ ? std::vector<plx_tensor_desc>{desc_of(hidden), desc_of(tokens)}
                                : std::vector<plx_tensor_desc>{desc_of(hidden)};
        break;
      case UnitRole::mtp_entry:
        inputs = {desc_of(hidden), desc_of(hidden)};
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
    row.mtp_depth = unit->mtp_depth;
    bool split = false;  // the layer runs this rank's share of its work
    for (std::size_t i : unit->gradient_params) {
      row.parameters += params_[i].whole_numel();
      if (params_[i].tp.tensor_parallel()) row.tensor_parallel += params_[i].whole_numel();
      split = split || params_[i].tp.split();
    }
    std::vector<std::size_t> named = unit->params;  // buffers too: checkpoints hold them
    for (std::size_t i : unit->gradient_params)
      if (std::find(named.begin(), named.end(), i) == named.end()) named.push_back(i);
    for (std::size_t i : named) {
      row.tensor_names.push_back(params_[i].name);
      if (!params_[i].te_name.empty()) row.tensor_names.push_back(params_[i].te_name);
    }
    // A layer split over tp estimates its share; the whole model's products are tp shares.
    const double shares =
        split && tensor_group_ != nullptr ? static_cast<double>(tensor_group_->size()) : 1.0;
    // An encoder's embedding reads its own input (pixels cut into patches), whose trailing shape
    // the engine does not know: its products are not estimated.
    const bool encoder_input = unit->role == UnitRole::embedding && !produces_loss_;
    if (const auto flops = encoder_input ? std::nullopt : unit->layer->estimate_flops(inputs))
      row.flops_per_token = shares * (flops->forward + flops->backward) / static_cast<double>(s) +
                            (unit->role == UnitRole::decoder ? connection_->flops_per_token() : 0.0);
    rows.push_back(std::move(row));
  }
  return rows;
}

Model::ActivationEstimate Model::activation_estimate(int64_t micro_batch, uint32_t cp) const {
  const int64_t whole = settings_.seq_length;
  if (micro_batch < 1)
    throw std::invalid_argument("the micro-batch size must be at least 1, got " +
                                std::to_string(micro_batch));
  if (cp < 1)
    throw std::invalid_argument("the context-parallel size must be at least 1, got " + std::to_string(cp));
  // At cp 1 the sequences are whole: no cut, any length.
  if (cp > 1 && whole % (2 * static_cast<int64_t>(cp)) != 0)
    throw std::invalid_argument("model.seq_length (" + std::to_string(whole) + ") cannot be cut into 2 x " +
                                std::to_string(cp) + " context-parallel chunks: it must be a multiple of " +
                                std::to_string(2 * static_cast<int64_t>(cp)));
  const int64_t seq = cp > 1 ? whole / cp : whole;
  const DLDataType dtype = settings_.activation_dtype;
  const double element = static_cast<double>(dtype.bits) / 8.0;
  const plx_tensor_desc tokens = desc_of({micro_batch, seq}, plx_dtype_i32());
  const plx_tensor_desc hidden = desc_of({micro_batch, stream_seq(seq), settings_.hidden_size}, dtype);
  const int64_t stream_tokens = micro_batch * stream_seq(seq);
  const auto bytes_of = [](const std::vector<plx_tensor_desc>& descs) {
    double total = 0;
    for (const plx_tensor_desc& d : descs) {
      double count = static_cast<double>(d.dtype.bits) / 8.0;
      for (uint32_t i = 0; i < d.ndim; ++i) count *= static_cast<double>(d.dims[i]);
      total += count;
    }
    return total;
  };
  ActivationEstimate out;
  out.streams = connection_->stream_bytes(stream_tokens, element) * static_cast<double>(1 + plan_.mtp_depths);
  out.total = out.streams;
  for (const auto& unit : units_) {
    std::vector<plx_tensor_desc> inputs;
    double engine = 0;  // what the engine and the connection keep of the unit
    switch (unit->role) {
      case UnitRole::embedding:
      case UnitRole::mtp_embedding:
        inputs = {tokens};
        break;
      case UnitRole::head:
      case UnitRole::mtp_head:
        if (!produces_loss_) {  // an encoder's output layer: its output is handed on, not kept
          inputs = {hidden};
          break;
        }
        inputs = {hidden, tokens};
        engine = bytes_of(unit->layer->output_desc(inputs));  // the loss and the logits
        break;
      case UnitRole::mtp_entry:
        inputs = {hidden, hidden};
        break;
      case UnitRole::final_norm:
      case UnitRole::mtp_norm:
        inputs = {hidden};
        engine = bytes_of(unit->layer->output_desc(inputs));  // read by the head and the next depth
        break;
      case UnitRole::decoder:
        inputs = {hidden};
        engine = connection_->kept_bytes_per_unit(stream_tokens, element);
        break;
    }
    const bool encoder_input = unit->role == UnitRole::embedding && !produces_loss_;  // as in summary()
    const std::optional<double> saved =
        encoder_input ? std::nullopt : unit->layer->estimate_activation_bytes(inputs, cp);
    out.units.push_back(saved ? std::optional<double>(*saved + engine) : std::nullopt);
    if (!saved) out.total.reset();
    if (out.total) *out.total += *out.units.back();
  }
  return out;
}

std::vector<uint32_t> Model::parameter_chunks() const {
  std::vector<uint32_t> chunk_of(params_.size(), 0);
  std::vector<bool> seen(params_.size(), false);
  for (const Chunk& chunk : chunks_)
    for (std::size_t u = chunk.first_unit; u < chunk.end_unit; ++u) {
      std::vector<std::size_t> declared = units_[u]->params;
      declared.insert(declared.end(), units_[u]->gradient_params.begin(), units_[u]->gradient_params.end());
      for (std::size_t p : declared)
        if (!seen[p]) {
          seen[p] = true;
          chunk_of[p] = chunk.index;
        }
    }
  return chunk_of;
}

double Model::connection_flops_per_token() const {
  return connection_->flops_per_token();
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

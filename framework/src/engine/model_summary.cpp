// What `plexus model show` and the trainer's FLOP rate read: per unit its numbers, parameters and
// FLOPs per token.
#include <algorithm>

#include "engine/model_internal.hpp"

namespace plexus {
namespace {

// The summary's kind of a row: "decoder" for a decoder layer (checkpoint tools select on it).
const char* role_word(UnitRole role) {
  return role == UnitRole::decoder ? "decoder" : role_name(role);
}

plx_tensor_desc desc_of(const Tensor& t) {
  plx_tensor_desc d{};
  d.ndim = static_cast<uint32_t>(t.shape().size());
  d.dtype = t.dtype();
  for (uint32_t i = 0; i < d.ndim; ++i) d.dims[i] = t.shape()[i];
  return d;
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
        inputs = {desc_of(hidden), desc_of(tokens)};
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
    const double shares = split ? static_cast<double>(tensor_group_->size()) : 1.0;
    if (const auto flops = unit->layer->estimate_flops(inputs))
      row.flops_per_token = shares * (flops->forward + flops->backward) / static_cast<double>(s) +
                            (unit->role == UnitRole::decoder ? connection_->flops_per_token() : 0.0);
    rows.push_back(std::move(row));
  }
  return rows;
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

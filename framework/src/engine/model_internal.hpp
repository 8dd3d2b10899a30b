// The Model's private structures, shared by the files that implement it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/connection.hpp"
#include "engine/parameter_residency.hpp"
#include "plexus/core/engine/model.hpp"

namespace plexus {

// A unit's place in the dataflow. The main model: embedding -> decoder layers -> final norm ->
// head. Each multi-token-prediction depth k after it (Megatron-LM's MTP layer): mtp_embedding of
// the tokens rolled k places -> mtp_entry (enorm, hnorm, eh_proj over that and depth k-1's
// hidden states) -> its decoder layers on a stream of their own -> mtp_norm -> mtp_head (the
// shared output layer, targets rolled k places).
enum class UnitRole { embedding, decoder, final_norm, head, mtp_embedding, mtp_entry, mtp_norm, mtp_head };

// The role's words in messages: "final norm", "MTP entry", "decoder layer".
inline const char* role_name(UnitRole role) {
  switch (role) {
    case UnitRole::embedding:
      return "embedding";
    case UnitRole::final_norm:
      return "final norm";
    case UnitRole::head:
      return "head";
    case UnitRole::mtp_embedding:
      return "MTP embedding";
    case UnitRole::mtp_entry:
      return "MTP entry";
    case UnitRole::mtp_norm:
      return "MTP final norm";
    case UnitRole::mtp_head:
      return "MTP head";
    case UnitRole::decoder:
      break;
  }
  return "decoder layer";
}

struct Model::Unit {
  std::string label;  // for messages: "decoder.layers.2 attention (transformer.attention)"
  UnitRole role = UnitRole::decoder;
  std::string component;
  std::string symbol;                                 // decoder layers: the stack's symbol
  int64_t physical = -1, logical = -1, segment = -1;  // decoder layers: their numbers
  uint32_t mtp_depth = 0;                             // 0: the main model; k >= 1: the k-th MTP depth's unit
  std::unique_ptr<ConfigHandle> config;
  std::unique_ptr<LayerInstance> layer;
  std::vector<std::size_t> params;  // indices into the ParameterStore, in the layer's order
  // params without buffers, and the connection's around a decoder unit: what backward writes
  std::vector<std::size_t> gradient_params;
  std::vector<DLTensor> param_views;
  std::vector<DLTensor> grad_views;
  std::vector<plx_stage_info> stages;
  uint32_t num_outputs = 0;
  uint32_t num_stages() const noexcept { return static_cast<uint32_t>(stages.size()); }
};

// What a scheduler sees as one unit: a logical layer (a group's layers together), or the
// embedding, the final norm or the head; its stages are its model units' in order.
struct LogicalUnit {
  std::size_t first = 0;  // index into Model::units_
  std::size_t count = 0;
};

struct Model::Chunk {
  uint32_t index = 0;                        // among the whole model's chunks (ChunkSpec::index)
  std::size_t first_unit = 0, end_unit = 0;  // its model units [first_unit, end_unit)
  std::vector<LogicalUnit> logical;          // its scheduler units, in forward order
  bool embedding = false, head = false;      // it starts with the embedding, ends with the head
  // With the head: the main final norm's and head's units, and each MTP depth's (after them).
  std::size_t final_norm_unit = 0, head_unit = 0;
  struct MtpDepth {
    std::size_t embedding = 0, entry = 0, norm = 0, head = 0;
  };
  std::vector<MtpDepth> mtp;
};

// Where a unit's weight gradients stand in one microbatch when the scheduler splits them off.
enum class WeightGrads : uint8_t {
  with_backward,  // computed by backward (not split): nothing to wait for
  due,            // backward ran without them; the state waits for backward_weights
  done,           // backward_weights ran
};

// One microbatch through one chunk: its layer states, the buffers between its units, the
// connection's state and where its forward and backward stand (checked against the order a
// scheduler drives it in). Indexed by model unit; entries outside the chunk stay empty.
struct Model::Run {
  const Chunk* chunk = nullptr;
  uint32_t microbatch = 0;
  int64_t batch_shape[2] = {0, 0};  // its tokens' [batch, seq]
  bool training = false;
  StepProfile* profile = nullptr;  // training runs: the model's profile; evaluation is not timed
  Tensor tokens, targets;          // the batch on the model's device (where the chunk needs them)
  Tensor loss_scale;               // [1]: dL/dloss for the head's backward
  // The same scale for the layers' own loss terms (plx_backward_args.loss_scale, ABI 1.4).
  double loss_scale_value = 1.0;
  std::vector<std::unique_ptr<LayerInstance::State>> states;
  std::vector<std::vector<Tensor>> outputs;  // per unit, allocated at its first stage
  std::vector<Tensor> grad_inputs;           // per unit: the input gradient it writes
  std::vector<WeightGrads> weights;          // per unit
  std::unique_ptr<ConnectionState> connection;
  ParameterResidency::Ledger ledger;
  // The next forward call expected, and the next backward one (-1: backward complete).
  std::size_t forward_unit = 0;
  uint32_t forward_stage = 0;
  int64_t backward_unit = -1;
  uint32_t backward_stage = 0;
  bool input_set = false, output_grad_set = false;  // a chunk boundary's tensor arrived
  double loss = 0;
  // An encoder's head: the gradient of its output (set_chunk_output_grad).
  Tensor output_grad;
  // MIMO's splice, per special token (ModelOptions::splice_tokens): its positions in the
  // microbatch (b * seq + s, row-major), the rows replacing the embedding's there, and their
  // gradient after backward.
  std::vector<std::vector<int64_t>> splice_positions;
  std::vector<Tensor> splice_rows, splice_grads;
  // Multi-token prediction, per depth k-1: the rolled tokens and targets, the depth's own
  // stream, the entry's gradients of its two inputs, and the loss; the scale of those losses'
  // gradients (mtp_loss_scaling_factor / depths of the main loss's).
  std::vector<Tensor> mtp_tokens, mtp_targets;
  std::vector<std::unique_ptr<ConnectionState>> mtp_connections;
  std::vector<Tensor> mtp_embedding_grads, mtp_hidden_grads;
  std::vector<double> mtp_losses;
  Tensor mtp_loss_scale;
  bool forward_complete() const noexcept { return forward_unit == chunk->end_unit; }
  bool backward_complete() const noexcept { return backward_unit < static_cast<int64_t>(chunk->first_unit); }
};

}  // namespace plexus

// A language model on one rank, assembled from layer components as the model's stack describes
// it (plexus/core/engine/decoder_plan.hpp):
//   embedding -> the decoder's layers, each wrapped in the connection (residual or mHC) ->
//   final norm -> LM head with cross-entropy loss,
// or the part of it this rank holds: its chunks (docs/architecture.md, "The engine"). The
// connection belongs to the engine, not to the layers, so every layer works with every connection.
//
// Each layer component instance is one unit. A scheduler drives (microbatch, unit, stage) calls
// through a plx_schedule_env the model provides; the model checks the order it is driven in.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/engine/parameters.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/core/plugin_host.hpp"

namespace plexus {

// The mhc section of a run config (docs/mhc.md).
struct MhcSettings {
  bool enabled = false;
  int64_t streams = 1;      // n
  int32_t iterations = 20;  // K
  double eps = 1e-6;
  double init_gating = 0.01;   // initial alpha_pre, alpha_post, alpha_res
  bool transposed = false;     // mix with H_res transposed
  std::string backend;         // the fusion backend component
  boost::json::value options;  // its options

  static MhcSettings from_run_config(const boost::json::value& run_config);
};

// The model section of a run config with derived values filled in (0 = "derive").
struct ModelSettings {
  int64_t vocab_size = 0;
  // Megatron's padding: rows of the embedding and output layer, a multiple of
  // make_vocab_size_divisible_by x tp (set by the model, which knows tp; vocab_size until then).
  int64_t make_vocab_size_divisible_by = 1;
  int64_t padded_vocab_size = 0;
  // model.sequence_parallel; the model clears it without a tp group of 2 or more ranks.
  bool sequence_parallel = false;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_query_groups = 0;
  int64_t ffn_hidden_size = 0;
  int64_t seq_length = 0;
  bool tied = true;
  double mtp_loss_scaling_factor = 0.1;  // the MTP losses' weight, over their depths
  // run.precision: the dtype of activations and their gradients between units (float32, or
  // bfloat16 on CUDA devices); parameters, gradients and optimizer state are float32 either way.
  DLDataType activation_dtype = plx_dtype_f32();
  boost::json::object layer_config;  // what layers read through plx_layer_create_args.model_config
  MhcSettings mhc;

  static ModelSettings from_run_config(const boost::json::value& run_config);
  // Sets padded_vocab_size for `tp` tensor-parallel ranks and tells the layers
  // (model_config.padded_vocab_size).
  void pad_vocabulary(int64_t tp);
};

// One microbatch of token ids and next-token targets, int32 [batch, seq]. For an encoder (a
// model whose head produces an output, not a loss: a MIMO modality encoder) `tokens` holds its
// input, whatever the embedding reads (pixels cut into patches, float32 [batch, patches,
// patch_dim]: its first two dimensions are the stream's batch and sequence), and `targets` is
// empty.
struct Batch {
  Tensor tokens;
  Tensor targets;
  // Multi-token prediction depth d's tokens and targets (index d - 1), laid out as tokens: set by
  // a caller that cuts sequences (context parallelism), who must roll them on the whole
  // sequences first. Empty: the model rolls tokens and targets itself.
  std::vector<Tensor> mtp_tokens = {};
  std::vector<Tensor> mtp_targets = {};
};

// Thrown when a loss, an activation or a gradient is not finite; names the first unit.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One contiguous piece of the model that a rank builds and a schedule runs as one: the decoder's
// logical layers [first_layer, end_layer), with the embedding before them when it starts the
// model and the final norm and head after them when it ends it (docs/architecture.md,
// "Placement").
struct ChunkSpec {
  uint32_t first_layer = 0, end_layer = 0;
  bool embedding = false;
  bool output_layers = false;
  // Its number among the whole model's chunks, in forward order (k = v * pp + r for pipeline rank
  // r's virtual stage v): pipeline transfers name chunks by it.
  uint32_t index = 0;
};

// The chunks one model object builds, in forward order.
struct ModelPlacement {
  std::vector<ChunkSpec> chunks;
  // One chunk holding the whole model: what a rank builds without pipeline parallelism.
  static ModelPlacement whole(const DecoderPlan& plan);
};

namespace distributed {
class Runtime;
class Communicator;
}  // namespace distributed

struct ModelOptions {
  ModelPlacement placement;  // no chunks: the whole model
  // The parameters will be handed to a data-parallel strategy (shard_parameters, then
  // initialize), so none is allocated whole here.
  bool deferred_parameters = false;
  // Pipeline parallelism: the "pp" group (rank r is pipeline stage r), over which the chunks'
  // boundaries travel, and the number of chunks of the whole model (pipeline_layout.hpp). nullptr:
  // this rank holds every chunk there is.
  const distributed::Communicator* pipeline_group = nullptr;
  uint32_t model_chunks = 1;
  // Tensor parallelism: the "tp" group its layers split their parameters over (nullptr: none).
  const distributed::Communicator* tensor_group = nullptr;
  // The expert grid's tensor-parallel group, when it has more than one rank and is not tensor_group:
  // the experts declared split over "expert_tp" (plx_param_spec.tp_group) are cut over it.
  const distributed::Communicator* expert_tensor_group = nullptr;
  // Without a group: the tp size whose vocabulary padding the model takes (plexus model show --tp
  // shows a model laid out for tp ranks from one process).
  int64_t padding_tp = 1;
  // Context parallelism: every layer gets this rank's chunks of each sequence, and must say it is
  // correct on them (PLX_LAYER_CONTEXT_PARALLEL).
  bool context_parallel = false;
  // A module of a MIMO model (docs/mimo.md): every parameter's name starts with `name_prefix`
  // ("language_model.", "modality_submodules.images.encoders.clip_encoder."), the head's with
  // `head_name_prefix` instead when it is set (an encoder's input projection,
  // "modality_submodules.images.input_projections.0.").
  std::string name_prefix{}, head_name_prefix{};
  // MIMO's special tokens, one per modality: the embedding's output rows at each of them are
  // replaced by that modality's embeddings (set_splice), in the microbatch's row-major (batch,
  // sequence) order, and their gradient goes back to the modality (take_splice_grad) instead of
  // to the embedding.
  std::vector<int32_t> splice_tokens{};
  // The head hands its output on instead of producing a loss (a MIMO encoder): what a pipeline
  // stage that does not build the head must be told; where the head is built, its flags decide.
  bool output_head = false;
};

class StepProfile;
class Timeline;
class ShardedParameters;
class Connection;
class ConnectionState;
class ParameterResidency;
class PipelineLink;

class Model {
 public:
  Model(const PluginHost& host, const boost::json::value& run_config, ModelOptions options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelSettings& settings() const noexcept { return settings_; }
  // The whole model's decoder, as the stack describes it (this rank may hold part of it).
  const DecoderPlan& plan() const noexcept { return plan_; }
  // The tensor-parallel group (ModelOptions::tensor_group), or nullptr when the layers are whole.
  const distributed::Communicator* tensor_group() const noexcept { return tensor_group_; }
  // The group a parameter's shards are split over (TensorSplit::group): the tp group, or the
  // expert_tp one; nullptr for a whole parameter.
  const distributed::Communicator* split_group(const TensorSplit& split) const noexcept {
    if (!split.split()) return nullptr;
    return split.group == "expert_tp" && expert_tensor_group_ != nullptr ? expert_tensor_group_
                                                                         : tensor_group_;
  }
  // Sequence parallelism is on (model.sequence_parallel with a tp group): the stream between units
  // holds this rank's 1/tp of each microbatch's tokens.
  bool sequence_parallel() const noexcept { return sequence_parallel_; }
  // The sequence length of the stream of a microbatch of `seq` tokens per sequence: seq / tp under
  // sequence parallelism (the stream's [batch, seq / tp] are this rank's consecutive block of the
  // microbatch's batch x seq tokens, in order), else seq.
  int64_t stream_seq(int64_t seq) const noexcept;
  // Where the parameters live and the layers run (run.device).
  DLDevice device() const noexcept { return device_; }
  ParameterStore& parameters() noexcept { return params_; }
  const ParameterStore& parameters() const noexcept { return params_; }
  // Every parameter from its init spec (or its layer's initializer). Under a data-parallel
  // strategy unit by unit: each unit written whole, then only this rank's part kept.
  void initialize(uint64_t seed);
  // Calls write(p) for every parameter while its whole value is there to be written (loading a
  // checkpoint): under a data-parallel strategy unit by unit, each rank keeping its part.
  void write_parameters(const std::function<void(std::size_t)>& write);

  // Forward and backward of every microbatch in the order the scheduler chooses, through a model
  // of one chunk holding the whole model; gradients accumulate (the caller zeroes them). Returns
  // the mean loss over the microbatches.
  double forward_backward(const SchedulerInstance& scheduler, const std::vector<Batch>& microbatches);
  // Times every unit's forward and backward and every mHC connection of training microbatches
  // into `profile` (nullptr: off); evaluation is not timed.
  void set_profile(StepProfile* profile) noexcept { profile_ = profile; }
  // Records every unit stage of training microbatches and every wait for a pipeline transfer as
  // spans of `timeline` while it records (nullptr: off); evaluation is not recorded.
  void set_timeline(Timeline* timeline) noexcept { timeline_ = timeline; }

  // The chunks, for a pipeline schedule: one microbatch through one chunk. start_microbatches
  // begins a step's microbatches on every chunk; a chunk without the embedding takes its input
  // from set_chunk_input (the previous chunk's take_chunk_output) before its forward, and a chunk
  // without the head its output gradient from set_chunk_output_grad (the next chunk's
  // take_chunk_input_grad) before its backward. finish_microbatches checks every microbatch
  // completed on every chunk, frees them, and returns the mean loss of those whose chunk holds the
  // head (0 when none does).
  std::size_t num_chunks() const noexcept;
  // Whether the model is a stage of a pipeline (ModelOptions::pipeline_group of more than one rank).
  bool pipelined() const noexcept;
  // The most microbatches of one step whose forward had completed and whose backward had not, at
  // once, on any of this rank's chunks in the last step (what a pipeline schedule keeps alive).
  std::size_t peak_microbatches_in_flight() const noexcept { return peak_in_flight_; }
  void start_microbatches(const std::vector<Batch>& microbatches, bool training);
  void forward_chunk(uint32_t chunk, uint32_t microbatch);
  void backward_chunk(uint32_t chunk, uint32_t microbatch);
  Tensor take_chunk_output(uint32_t chunk, uint32_t microbatch);
  void set_chunk_input(uint32_t chunk, uint32_t microbatch, Tensor stream);
  Tensor take_chunk_input_grad(uint32_t chunk, uint32_t microbatch);
  void set_chunk_output_grad(uint32_t chunk, uint32_t microbatch, Tensor grad);
  double finish_microbatches();
  // Pipelined, for a schedule the engine drives itself (MIMO's multi-module pipeline; a scheduler
  // plugin makes the same calls through plx_schedule_env): the transfers of one microbatch of a
  // chunk over the pp group (PipelineLink), each started at once. send_chunk_output: its output
  // to the next stage, after its forward; receive_chunk_input: its input from the previous stage,
  // before its forward; send_chunk_input_grad: its input's gradient back, after its backward;
  // receive_chunk_output_grad: its output's gradient, before its backward. finish_transfers
  // completes every send (the end of a step); abandon_transfers drops everything in flight after
  // a failure. Each throws naming the call on a model that is not a pipeline stage.
  void send_chunk_output(uint32_t chunk, uint32_t microbatch);
  void receive_chunk_input(uint32_t chunk, uint32_t microbatch);
  void send_chunk_input_grad(uint32_t chunk, uint32_t microbatch);
  void receive_chunk_output_grad(uint32_t chunk, uint32_t microbatch);
  void finish_transfers();
  void abandon_transfers() noexcept;
  // Whether the head produces a loss (a language model), or an output (an encoder): then a chunk
  // with the head hands its head's output 0 on through take_chunk_output and takes its gradient
  // through set_chunk_output_grad, as a chunk without the head does its stream.
  bool produces_loss() const noexcept { return produces_loss_; }
  // MIMO's splice on a chunk with the embedding (ModelOptions::splice_tokens): the embeddings of
  // special token `token` (its index there) for one microbatch, [N, hidden] in the activation
  // dtype, N its occurrences in the microbatch; set before the chunk's forward. After the chunk's
  // backward, take_splice_grad returns their gradient, [N, hidden].
  void set_splice(uint32_t chunk, uint32_t microbatch, std::size_t token, Tensor rows);
  Tensor take_splice_grad(uint32_t chunk, uint32_t microbatch, std::size_t token);
  // Output `output` of the head of a microbatch whose forward completed on a chunk with the head
  // (a language model's 1: the logits, [batch, seq, vocab]), until finish_microbatches.
  const Tensor& head_output(uint32_t chunk, uint32_t microbatch, uint32_t output);
  // The last step's (or evaluation's) mean loss of each MTP depth over its microbatches, on a
  // rank whose chunk holds the head; zeros elsewhere (so the pipeline's sum is it). Sized
  // plan().mtp_depths. Not part of the returned loss, which is the main model's.
  const std::vector<double>& mtp_losses() const noexcept { return mtp_losses_; }

  // Hands the parameters to a data-parallel strategy component (plexus/data_parallel.h), before
  // initialize() for a model built with deferred parameters (or after it, moving the values in):
  // the model is cut into FSDP units (the embedding; every `layers_per_unit` logical decoder
  // layers; the final norm with the head), whose whole values exist while a unit's forward or
  // backward runs, and whose gradients go to the strategy as each unit's backward completes.
  // Throws config::ConfigError for a unit size that does not divide a chunk's logical layers or
  // that would make a chunk's whole decoder one unit.
  // `alone`: parameters (by index; empty: none) that must be alone in their unit's buffer (a
  // tied parameter two pipeline stages hold): the head holding one is a unit of its own.
  void shard_parameters(const Component& strategy, plx_config options, int64_t layers_per_unit,
                        const distributed::Runtime& runtime, const std::vector<bool>& alone = {});
  // The strategy's buffers, or nullptr when the parameters are whole here.
  ShardedParameters* sharded() noexcept;
  const ShardedParameters* sharded() const noexcept;
  // Calls every layer's after_step (ABI 1.5) once the optimizer has taken step `step` (0-based),
  // so layers update their buffers (PLX_PARAM_BUFFER) from the step's training forwards.
  void after_step(int64_t step);
  // Whether any layer has an after_step (the trainer times the call only then).
  bool has_after_step() const;

  // Forward only; returns the loss (on a pipeline stage without the head 0; the stages' sum is the
  // loss). Pipelined: every stage calls it with the same batch, the stages pass the stream on.
  double evaluate(const Batch& batch);
  // Forward only; returns the logits [vocab] of position `position` of sequence 0 (pipelined: on
  // every stage, broadcast from the last).
  std::vector<float> next_token_logits(const Batch& batch, int64_t position);

  // Checks every gradient; throws NonFiniteError naming the first unit (in forward order) with
  // a non-finite gradient, and the parameter.
  void check_gradients_finite() const;
  // The model chunk (ChunkSpec::index) of each parameter's first declaring unit, by parameter.
  std::vector<uint32_t> parameter_chunks() const;
  // Model FLOPs of one training step's forward+backward per token, when every layer can tell.
  std::optional<double> flops_per_token() const;

  // One row per unit, in forward order, for `plexus model show`.
  struct UnitSummary {
    std::string label;   // "decoder.layers.1 attention (transformer.attention)"
    std::string kind;    // "embedding", "decoder", "final norm", "head"
    std::string symbol;  // the stack's symbol of a decoder layer, else ""
    std::string component;
    int64_t physical = -1, logical = -1, segment = -1;  // decoder layers only (an MTP depth's: within it)
    uint32_t mtp_depth = 0;                             // k >= 1: a unit of the k-th MTP depth
    int64_t parameters = 0;  // elements of the whole model's unit, the connection's included
    // Of those, the elements of tensor-parallel parameters, which tp ranks divide: a rank holds
    // parameters - tensor_parallel + tensor_parallel / tp (plexus model show --tp).
    int64_t tensor_parallel = 0;
    // The checkpoint names of its parameters and the connection's, in both spellings where a layer
    // declares a second (plx_param_spec.te_name): what a checkpoint holds of this unit.
    std::vector<std::string> tensor_names;
    // Forward + backward, when the layer can tell; under mHC its connection's products included.
    std::optional<double> flops_per_token;
  };
  std::vector<UnitSummary> summary() const;

  // The activation memory one training microbatch of [micro_batch, seq_length] leaves on a rank
  // for its backward, at its peak (every forward done, no backward begun), the sequences cut over
  // `cp` context-parallel ranks; the layers' own answers (ABI 1.10) for the layout asked, not the
  // one they were built with. Per unit in summary()'s order: its layer's saved bytes, what the
  // connection keeps around it, and the outputs the engine holds for the backward (a norm's output
  // for the head, the head's logits); and the connection's streams (the main model's and one per
  // MTP depth). Empty when a layer cannot tell. Temporaries of a call and the backward's
  // gradients are not counted.
  struct ActivationEstimate {
    std::vector<std::optional<double>> units;
    double streams = 0;
    std::optional<double> total;
  };
  ActivationEstimate activation_estimate(int64_t micro_batch, uint32_t cp) const;
  // The matrix-product FLOPs (forward + backward) of the connection around one decoder layer, per
  // token (0 for the plain residual).
  double connection_flops_per_token() const;

  struct Unit;
  struct Chunk;
  struct Run;

 private:
  struct UnitSource;  // model_build.cpp
  void build_chunk(const boost::json::value& model_section, const ChunkSpec& spec);
  void start_mtp(Run& run, const Batch& batch);
  std::size_t depth_index(std::size_t u) const;
  const Tensor& targets_of(const Run& run, std::size_t u) const;  // a head's: rolled for an MTP depth
  ConnectionState& stream_of(Run& run, std::size_t u) const;
  const Tensor& hidden_before(const Run& run, std::size_t d) const;
  void build_mtp_depth(const boost::json::value& model_section, uint32_t depth, Chunk& chunk);
  void build_unit(const UnitSource& source);
  // model_run.cpp: a stage in one sentence, and its parts.
  void forward_stage(Run& run, std::size_t unit, uint32_t stage);
  void backward_stage(Run& run, std::size_t unit, uint32_t stage);
  void backward_weights(Run& run, std::size_t unit);
  std::vector<DLTensor> forward_inputs(Run& run, std::size_t unit, uint32_t stage);
  void fold_forward(Run& run, std::size_t unit);
  void fold_backward(Run& run, std::size_t unit);
  void backward_tensors(Run& run, std::size_t unit, bool first_stage, std::vector<DLTensor>& grad_outputs,
                        std::vector<DLTensor>& grad_inputs);
  void finish_unit_backward(Run& run, std::size_t unit);
  std::unique_ptr<Run> start_run(uint32_t chunk, const Batch& batch, bool training, uint32_t microbatch,
                                 double loss_scale);
  Run& run_of(uint32_t chunk, uint32_t microbatch);
  const Chunk& whole_model_chunk(const char* what) const;
  // Pipelined: the boundary tensors a chunk's first forward and last backward stage wait for.
  void take_received_input(Run& run);
  void take_received_output_grad(Run& run);
  // Forward only of one batch through every chunk, stage after stage of the pipeline; returns the
  // run of the chunk holding the head (nullptr on the other stages).
  std::unique_ptr<Run> forward_only(const Batch& batch);
  void note_in_flight();
  PipelineLink& link_for(const char* call);
  std::vector<int64_t> stream_shape_of(const Run& run) const;
  void send_boundary(bool forward, const char* call, uint32_t chunk, uint32_t microbatch, Tensor tensor);
  void receive_boundary(bool forward, const char* call, uint32_t chunk, uint32_t microbatch);
  // model_splice.cpp: the special tokens' rows of the embedding's output and of its gradient.
  void find_splice_positions(Run& run, const Batch& batch) const;
  void splice_forward(Run& run, Tensor& embedded) const;
  void splice_backward(Run& run, const Tensor& grad) const;
  void initialize_one(std::size_t param, uint64_t seed);
  std::vector<float> vocabulary_row(std::size_t head_unit, std::vector<float> local) const;

  ModelSettings settings_;
  DecoderPlan plan_;
  const PluginHost* host_;
  DLDevice device_{kDLCPU, 0};
  ParameterStore params_;
  std::unique_ptr<Connection> connection_;
  std::unique_ptr<ParameterResidency> residency_;
  std::unique_ptr<PipelineLink> link_;  // pipelined: the transfers between stages
  const distributed::Communicator* tensor_group_ = nullptr;
  const distributed::Communicator* expert_tensor_group_ = nullptr;  // ModelOptions::expert_tensor_group
  bool context_parallel_ = false;  // ModelOptions::context_parallel
  bool sequence_parallel_ = false;
  bool produces_loss_ = true;  // the head's PLX_LAYER_PRODUCES_LOSS (an encoder's head has none)
  std::string name_prefix_, head_name_prefix_;  // ModelOptions
  std::vector<int32_t> splice_tokens_;          // ModelOptions
  std::unique_ptr<ConfigHandle> model_config_;
  std::vector<std::unique_ptr<Unit>> units_;  // every chunk's, in forward order
  std::vector<Chunk> chunks_;
  std::vector<std::vector<std::unique_ptr<Run>>> runs_;  // [chunk][microbatch] of the current step
  // This step's scheduler asked for weight gradients apart (plx_schedule_env.split_weight_gradients):
  // the backward of a layer with backward_weights leaves them out until the scheduler's call.
  bool split_weights_ = false;
  StepProfile* profile_ = nullptr;
  Timeline* timeline_ = nullptr;
  std::size_t peak_in_flight_ = 0;
  std::vector<double> mtp_losses_;  // finish_microbatches: the MTP depths' mean losses
  friend struct ScheduleEnvBridge;
};

}  // namespace plexus

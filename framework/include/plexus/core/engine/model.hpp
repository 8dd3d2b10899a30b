// A GPT-style model assembled from layer components:
//   embedding -> num_layers x (attention, MLP), each wrapped in a residual connection ->
//   final norm -> LM head with cross-entropy loss.
// The residual connection belongs to the engine, not to the layers (architecture.md), which is
// what lets a different connection (mHC) wrap the same layers later.
//
// Each component is one "unit". A scheduler drives (microbatch, unit, stage) calls through a
// plx_schedule_env the model provides; the model checks the order it is driven in.
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
#include "plexus/core/engine/parameters.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/core/mhc_backend.hpp"
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
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_query_groups = 0;
  int64_t ffn_hidden_size = 0;
  int64_t seq_length = 0;
  bool tied = true;
  // run.precision: the dtype of activations and their gradients between units (float32, or
  // bfloat16 on CUDA devices); parameters, gradients and optimizer state are float32 either way.
  DLDataType activation_dtype = plx_dtype_f32();
  boost::json::object layer_config;  // what layers read through plx_layer_create_args.model_config
  MhcSettings mhc;

  static ModelSettings from_run_config(const boost::json::value& run_config);
};

// One microbatch of token ids and next-token targets, int32 [batch, seq].
struct Batch {
  Tensor tokens;
  Tensor targets;
};

// Thrown when a loss, an activation or a gradient is not finite; names the first unit.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StepProfile;
class ShardedParameters;
namespace distributed {
class Runtime;
}
enum class UnitRole;

class Model {
 public:
  // `sharded`: the parameters will be handed to a data-parallel strategy (shard_parameters,
  // then initialize), so none is allocated whole here.
  Model(const PluginHost& host, const boost::json::value& run_config, bool sharded = false);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelSettings& settings() const noexcept { return settings_; }
  // Where the parameters live and the layers run (run.device).
  DLDevice device() const noexcept { return device_; }
  ParameterStore& parameters() noexcept { return params_; }
  const ParameterStore& parameters() const noexcept { return params_; }
  // Every parameter from its init spec (or its layer's initializer). Under a data-parallel
  // strategy unit by unit: each unit written whole, then only this rank's part kept.
  void initialize(uint64_t seed);

  // Forward and backward of every microbatch in the order the scheduler chooses; gradients
  // accumulate (the caller zeroes them). Returns the mean loss over the microbatches.
  double forward_backward(const SchedulerInstance& scheduler, const std::vector<Batch>& microbatches);
  // Times every unit's forward and backward and every mHC connection of training microbatches
  // into `profile` (nullptr: off); evaluation is not timed.
  void set_profile(StepProfile* profile) noexcept { profile_ = profile; }

  // Hands the parameters to a data-parallel strategy component (plexus/data_parallel.h), before
  // initialize() for a model built `sharded` (or after it, moving the values in): the model is
  // cut into FSDP units (the embedding; every `layers_per_unit`
  // logical decoder layers; the final norm with the head), whose whole values exist while a
  // unit's forward or backward runs, and whose gradients go to the strategy as each unit's
  // backward completes. Throws config::ConfigError for a unit size that does not divide the
  // decoder's logical layers or that would make the whole decoder one unit.
  void shard_parameters(const Component& strategy, plx_config options, int64_t layers_per_unit,
                        const distributed::Runtime& runtime);
  ShardedParameters* sharded() noexcept { return sharded_.get(); }
  const ShardedParameters* sharded() const noexcept { return sharded_.get(); }
  // Calls every layer's after_step (ABI 1.5) once the optimizer has taken step `step` (0-based),
  // so layers update their buffers (PLX_PARAM_BUFFER) from the step's training forwards.
  void after_step(int64_t step);
  // Whether any layer has an after_step (the trainer times the call only then).
  bool has_after_step() const;

  // Forward only; returns the loss.
  double evaluate(const Batch& batch);
  // Forward only; returns the logits [vocab] of position `position` of sequence 0.
  std::vector<float> next_token_logits(const Batch& batch, int64_t position);

  // Checks every gradient; throws NonFiniteError naming the first unit (in forward order) with
  // a non-finite gradient, and the parameter.
  void check_gradients_finite() const;
  // Model FLOPs of one training step's forward+backward per token, when every layer can tell.
  std::optional<double> flops_per_token() const;

  // One row per physical unit, in forward order, for `plexus model show`.
  struct UnitSummary {
    std::string label;      // "decoder.layers.1 attention (transformer.attention)"
    std::string kind;       // "embedding", "decoder", "final norm", "head"
    std::string symbol;     // the pattern symbol of a decoder layer, else ""
    std::string component;
    int64_t physical = -1, logical = -1, segment = -1;  // decoder layers only
    int64_t parameters = 0;                             // elements, the mHC connection's included
    // Forward + backward, when the layer can tell; under mHC its connection's products included.
    std::optional<double> flops_per_token;
  };
  std::vector<UnitSummary> summary() const;
  // The matrix-product FLOPs (forward + backward) of one mHC connection per token.
  double mhc_connection_flops_per_token() const;

  struct Unit;
  struct Run;

 private:
  struct LayerSource {  // a layer component and its validated options
    std::string component;
    boost::json::value options;
    std::string options_path;
  };
  void build_unit(const LayerSource& source, UnitRole role, const std::string& prefix, const std::string& label,
                  uint32_t layer_index, const std::string& connection_prefix);
  void forward_stage(Run& run, uint32_t unit, uint32_t stage);
  void backward_stage(Run& run, uint32_t unit, uint32_t stage);
  // The weight gradients of a unit whose backward left them out (split_weights_), and what the
  // engine does once a unit is through both (model_run.cpp).
  void backward_weights(Run& run, uint32_t unit);
  void finish_unit_backward(Run& run, uint32_t unit);
  void check_weight_gradients_done(const Run& run) const;
  void refresh_views(Unit& unit);
  std::unique_ptr<Run> start_run(const Batch& batch, bool training, uint32_t microbatch, double loss_scale);
  void run_forward(Run& run);

  void declare_mhc_parameters(Unit& unit, const std::string& prefix);
  void initialize_one(std::size_t param, uint64_t seed);

  ModelSettings settings_;
  const PluginHost* host_;
  DLDevice device_{kDLCPU, 0};
  ParameterStore params_;
  std::unique_ptr<ConfigHandle> mhc_config_;
  std::unique_ptr<MhcBackend> mhc_backend_;
  std::vector<std::unique_ptr<Unit>> units_;  // physical: the embedding, every decoder layer, final norm, head
  // What a scheduler sees as units: the embedding, each logical decoder layer (a group's layers
  // together), the final norm and the head; their stages are their physical units' in order.
  struct LogicalUnit {
    std::size_t first = 0;  // index into units_
    std::size_t count = 0;
  };
  std::vector<LogicalUnit> logical_units_;
  std::vector<std::string> final_norm_aliases_;  // other checkpoint prefixes of the final norm
  std::unique_ptr<ConfigHandle> model_config_;
  std::vector<std::unique_ptr<Run>> runs_;  // microbatches of the current step
  // This step's scheduler asked for weight gradients apart (plx_schedule_env.split_weight_gradients):
  // the backward of a layer with backward_weights leaves them out until the scheduler's call.
  bool split_weights_ = false;
  StepProfile* profile_ = nullptr;
  // Under a data-parallel strategy: the FSDP unit of each physical unit, and whether it is the
  // first or last physical unit of it (where its values are acquired and released).
  std::unique_ptr<ShardedParameters> sharded_;
  std::vector<std::size_t> fsdp_of_;
  std::vector<bool> fsdp_first_, fsdp_last_;
  friend struct ScheduleEnvBridge;
  friend struct MhcStep;
};

}  // namespace plexus

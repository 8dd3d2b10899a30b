// What a training step does to the parameters once its microbatches' backward ran (the gradient
// reduction, the finiteness check, clipping and AdamW), the memory it holds, and the optimizer
// state a checkpoint reads and writes: one interface, so the training loop and the checkpoint
// code have no branch on whether the parameters are whole on this rank (WholeUpdate: AdamW over
// the store) or live with a data-parallel strategy (ShardedUpdate: AdamW over this rank's shards
// of the FSDP units).
#pragma once

#include <boost/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/pipeline_stages.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/core/engine/optimizer.hpp"
#include "plexus/core/engine/step_profile.hpp"

namespace plexus {

class ParameterUpdate {
 public:
  virtual ~ParameterUpdate() = default;

  // Before a step's first microbatch: every gradient to zero.
  virtual void begin_step(int64_t microbatches) = 0;
  // After its last backward: the gradient reductions complete.
  virtual void finish_gradients(StepProfile* profile) = 0;
  // Throws NonFiniteError naming the first parameter with a non-finite gradient (under a strategy
  // on every rank, when any rank finds one).
  virtual void check_gradients_finite() const = 0;
  // Clips and updates every parameter; returns the gradient norm before clipping. `step` is 0-based.
  virtual double apply(int64_t step) = 0;
  // apply() in its two halves, for one norm over several updates (MIMO's modules clip by the norm
  // of all their gradients together): the squared gradient norm over this update's parameters
  // (collective as apply is), then clip by `norm` and update.
  virtual double squared_gradient_norm() const = 0;
  virtual void apply_with_norm(int64_t step, double norm) = 0;
  // Sums parameter p's (reduced) gradient over `group`: the stages holding a tied parameter each
  // get the whole gradient (Megatron's embedding group), after the data-parallel reduction.
  virtual void all_reduce_gradient(std::size_t p, const distributed::Communicator& group) = 0;
  // Sums every gradient that is this rank's tokens' part (Parameter::partial_over_tp: the norms,
  // mHC and MTP entry under sequence parallelism) over the tp group, after the data-parallel
  // reduction (the two sums commute), in one call per buffer.
  virtual void sum_partial_gradients(const distributed::Communicator& tp) = 0;
  virtual double last_lr() const = 0;

  // Bytes held on this rank now and at their peak.
  struct Memory {
    double parameters = 0, gradients = 0, optimizer = 0;
    double peak_parameters = 0, peak_gradients = 0, peak_parameters_and_gradients = 0;
  };
  virtual Memory memory() const = 0;
  // The data-parallel part of the run's start record, and a line for the log ("" for none).
  virtual boost::json::object describe() const = 0;
  virtual std::string summary_line() const = 0;

  // Checkpoints. Saving walks the parameters in order: the whole value of parameter p and of its
  // moment `which` (0: exp_avg, 1: exp_avg_sq), valid until the next call (under a strategy each
  // gathers its unit, collectively: every rank walks the same order); end_save releases what the
  // walk holds. Loading: fill(p, which, whole) writes a moment's whole value, this rank keeps its
  // part. (Parameter values are written through Model::write_parameters.)
  virtual const Tensor& saved_value(std::size_t p) = 0;
  virtual Tensor saved_moment(std::size_t p, int which) = 0;
  virtual void end_save() = 0;
  virtual void load_moments(const std::function<void(std::size_t p, int which, Tensor& whole)>& fill) = 0;
};

// What the update needs of the job: the data-parallel group (nullptr: one rank), and the sum over
// the ranks that hold the other experts of a layer divided over an ep group (unset: none is).
struct UpdateRanks {
  const distributed::Communicator* dp = nullptr;
  int64_t dp_rank = 0;
  std::function<double(double)> sum_over_ep;
  // Tensor parallelism: the sum over the tp group (unset: no parameter is split), and over the
  // expert grid's tp group where the experts are split over one that is not tp's.
  std::function<double(double)> sum_over_tp, sum_over_expert_tp;
  // Pipeline parallelism: the sum over the stages (unset: one stage), the sum of every stage's
  // squared parameter norms in the whole model's order (AdamW::set_stage_sum), and by parameter
  // whether this stage counts it in the gradient norm (empty: all; a tied copy counts on its owner
  // only).
  std::function<double(double)> sum_over_stages;
  std::function<double(const std::vector<double>&)> ordered_stage_sum;
  std::vector<bool> counted;
  // Parameters that must be alone in their FSDP unit's buffer (the tied ones: their reduced
  // gradients are summed over the stages shard by shard, so the layouts must agree).
  std::vector<bool> alone;
  // The job's groups, for a parameter whose gradient is reduced over a group of its own
  // (plx_param_spec.grad_group: experts over expert_dp) when no data-parallel strategy runs.
  const distributed::Runtime* runtime = nullptr;
};

// The sum of a value over `group`'s ranks (collective), or unset for a group of one rank or none:
// what UpdateRanks' sums are made of.
std::function<double(double)> sum_over(const distributed::Communicator* group);

// Pipeline parallelism: the store is one stage's part of the model (`stages`, gathered over `pp`;
// both must outlive the update): the norm sums the stages, in the whole model's order, and a tied
// copy counts on its owner stage only.
void add_pipeline_stages(UpdateRanks& ranks, const distributed::Communicator& pp,
                         const PipelineStages& stages);

// AdamW over the whole store.
std::unique_ptr<ParameterUpdate> make_whole_update(Model& model, const OptimizerSettings& settings,
                                                   const UpdateRanks& ranks);
// Hands the model's parameters to the data-parallel strategy distributed.data_parallel names
// (Model::shard_parameters), then AdamW over this rank's shards.
std::unique_ptr<ParameterUpdate> make_sharded_update(const PluginHost& host,
                                                     const boost::json::value& run_config, Model& model,
                                                     const distributed::Runtime& runtime,
                                                     const OptimizerSettings& settings,
                                                     const UpdateRanks& ranks);

}  // namespace plexus

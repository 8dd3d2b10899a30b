// The Trainer's state, shared by trainer.cpp (the loop) and trainer_checkpoint.cpp.
#pragma once

#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/metrics_log.hpp"
#include "engine/parameter_update.hpp"
#include "engine/pipeline_stages.hpp"
#include "engine/plugin_metrics.hpp"
#include "engine/progress.hpp"
#include "engine/thread_governor.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/tensor_names.hpp"
#include "plexus/core/engine/pipeline_layout.hpp"
#include "plexus/core/engine/step_profile.hpp"
#include "plexus/core/engine/timeline.hpp"
#include "plexus/core/engine/trainer.hpp"
#include "plexus/core/host_services.hpp"

namespace plexus {

struct Trainer::Impl {
  const PluginHost* host = nullptr;
  boost::json::value run_config;
  std::unique_ptr<DataSource> data;
  std::unique_ptr<Model> model;
  std::unique_ptr<ConfigHandle> scheduler_config;
  std::unique_ptr<SchedulerInstance> scheduler;
  // Gradient reduction, clipping, AdamW and the optimizer state, whether the parameters are whole
  // here or live with a data-parallel strategy.
  std::unique_ptr<ParameterUpdate> update;

  int64_t steps = 0, microbatches = 1, micro_batch_size = 1, seq_length = 1;
  int64_t eval_interval = 0, eval_iters = 1, log_interval = 1, exit_interval = 0;
  int64_t checkpoint_interval = 0, keep_last = 1;
  checkpoint::NameStyle checkpoint_names = checkpoint::NameStyle::local;  // how checkpoints spell names
  int64_t sample_tokens = 0;
  double sample_temperature = 1.0;
  std::string sample_prompt;
  uint64_t seed = 0;
  std::filesystem::path output_dir;
  int64_t start_step = 0;  // > 0 after resume_from

  // Data parallelism (one rank of one when single-process).
  const distributed::Runtime* runtime = nullptr;
  // The parameters' replicas: gradients are averaged and the optimizer sharded over them (dp, or
  // dp x cp under context parallelism). nullptr: a single replica.
  const distributed::Communicator* dp = nullptr;
  int64_t dp_rank = 0, dp_size = 1;
  // Which samples this rank reads: its rank among the "dp" group's (cp ranks read the same).
  int64_t data_rank = 0, data_size = 1;
  // Context parallelism: each microbatch's sequence split over the cp group (context_parallel.hpp).
  const distributed::Communicator* cp = nullptr;
  int64_t cp_rank = 0, cp_size = 1;
  // Pipeline parallelism: the pp group of more than one stage (nullptr: none), every stage's
  // parameters, and the stages that hold a tied parameter (Megatron's embedding group).
  const distributed::Communicator* pp = nullptr;
  PipelineLayout layout;  // every chunk and its stage (one chunk without pipelining)
  PipelineStages stages;
  std::unique_ptr<distributed::Communicator> tied_group;
  bool sends_to_writer = false;              // a later stage's rank in world rank 0's pp group (checkpoints)
  double over_pipeline(double value) const;  // the sum over the stages; itself without pipelining
  // The stages' sum of each value, averaged over the data-parallel ranks (a per-depth loss).
  std::vector<double> loss_over_job(std::vector<double> values) const;
  double over_job(double value, distributed::ReduceOp op) const;  // every rank of the job
  // MoE experts divided over an ep group of more than one rank, or parameters gathered for each
  // forward (ZeRO-3): every forward is collective, so each rank runs the same forwards
  // (evaluation rounds, the sample) as the others.
  bool collective_forward = false;
  bool writer = true;                       // world rank 0: metrics, progress, samples, checkpoints
  std::unique_ptr<StepProfile> profile;     // train.profile; nullptr when off
  std::unique_ptr<ThreadGovernor> threads;  // run.adapt_threads on the CPU; nullptr when off
  // train.trace: the spans of steps [trace_first, trace_end) (0-based); nullptr when off.
  std::unique_ptr<Timeline> timeline;
  int64_t trace_first = 0, trace_end = 0;
  double over_ranks(double value, distributed::ReduceOp op) const;  // dp group; itself on one rank
  void barrier() const;

  std::optional<double> flops_per_token;  // the model's, when every layer can tell
  double tokens_per_step = 0;             // over every data-parallel rank

  MetricsLog metrics;                             // world rank 0's metrics.jsonl and TensorBoard
  std::filesystem::path tensorboard_dir;          // train.tensorboard_dir; empty: none
  double peak_tflops = 0;                         // train.peak_tflops: one device's; 0: no MFU
  std::unique_ptr<PluginMetrics> plugin_metrics;  // the plugins' report_metric values, per step
  std::vector<Batch> batches;
  // Under context parallelism: a microbatch's whole sequences, before the split, and (with
  // multi-token prediction) one depth's rolled copy of them, cut after it (mtp_inputs.hpp).
  Batch whole_batch;
  Batch whole_rolled;

  // trainer.cpp: one optimizer step over this rank's share of the step's global batch.
  struct StepResult {
    double loss = 0, grad_norm = 0, seconds = 0;
    std::vector<double> mtp_losses;  // per multi-token-prediction depth, as the loss
    int cpu_threads = 0;             // the OpenMP threads it ran with, when they adapt
    double cpu_waited_cores = 0;     // and how long they waited for a core, in cores
    // This rank's calls and payload bytes per group of more than one rank and per kind of
    // collective during the step: {"tp": {"all_reduce": {"calls": 4, "bytes": 65536}}, ...}.
    boost::json::object comm;
  };
  StepResult train_step(int64_t step);
  // trainer_report.cpp: metrics, progress, evaluation and samples.
  void open_metrics();
  void report_start(const TrainerEvents& events);
  void report_step(int64_t step, const StepResult& result, detail::Progress& progress,
                   const TrainerEvents& events);
  void report_eval(int64_t steps_done, detail::Progress& progress, TrainResult& result,
                   const TrainerEvents& events);
  void report_end(detail::Progress& progress, const TrainResult& result);
  // Per data-parallel rank: bytes of parameters, gradients and optimizer state held now, and the
  // peak resident memory of the process (collective over dp).
  boost::json::array memory_per_rank() const;
  // Pipelined: the layout ("start" record), and per stage the most microbatches in flight at once
  // in the last step ("step" records; collective over pp).
  boost::json::object pipeline_layout_record() const;
  boost::json::array microbatches_in_flight() const;
  void write_metrics(const boost::json::object& record, const TrainerEvents& events);
  // A microbatch from the data source (training sample position, or validation batch index),
  // under context parallelism this rank's chunks of it.
  void read_batch(uint64_t at, Batch& batch, bool validation);
  double evaluate();
  std::string sample(int64_t step);
  // trainer_trace.cpp: recording starts before the first traced step (after a barrier, the
  // ranks' common origin) and ends after the last, when every rank's spans go to world rank 0,
  // which writes run.output_dir/trace.json. Collective over the job.
  void trace_before_step(int64_t step);
  void trace_after_step(int64_t step, const TrainerEvents& events);
  // trainer_checkpoint.cpp
  std::filesystem::path save_checkpoint(int64_t steps_done);
  void load_checkpoint(const std::filesystem::path& dir);
  void load_tensors(const std::filesystem::path& dir, const checkpoint::LoadedCheckpoint& loaded);
  boost::json::object checkpoint_state(int64_t steps_done) const;
  // trainer_stop.cpp
  // Collective over the dp group when events.stop_signal is set: whether any rank asked to
  // stop, the same answer on every rank. `steps_done` goes into it.
  std::optional<Interruption> agreed_stop(const TrainerEvents& events, int64_t steps_done) const;
  // Ends a run the ranks agreed to stop after stop.step steps: says so, writes a checkpoint of
  // that step (unless saved_step is that step, or no step was trained) and the "interrupted"
  // record, and fills result's interrupted and last_checkpoint. Collective, like a checkpoint.
  void stop_run(const Interruption& stop, int64_t saved_step, detail::Progress& progress, TrainResult& result,
                const TrainerEvents& events);
  // Ends a run at train.exit_interval (Megatron's --exit-interval) after `step` steps: a
  // checkpoint of that step (unless saved_step is it), the "exit" record, result's exited_at and
  // last_checkpoint. Every rank reaches it after the same step, so no agreement is needed.
  void exit_run(int64_t step, int64_t saved_step, detail::Progress& progress, TrainResult& result,
                const TrainerEvents& events);
};

}  // namespace plexus

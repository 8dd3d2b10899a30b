// MimoTrainer's state and the parts of its loop, shared by the files that implement it:
// mimo_trainer.cpp (building the modules, the loop), mimo_step.cpp (a training step),
// mimo_report.cpp (metrics, evaluation, checkpoints, stopping).
#pragma once

#include <boost/json.hpp>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/metrics_log.hpp"
#include "engine/mimo/mimo_bridge.hpp"
#include "engine/mimo/mimo_data.hpp"
#include "engine/mimo/mimo_modules.hpp"
#include "engine/parameter_update.hpp"
#include "engine/pipeline_stages.hpp"
#include "engine/progress.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/mimo_trainer.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/core/engine/timeline.hpp"

namespace plexus {

struct MimoTrainer::Impl {
  const PluginHost* host = nullptr;
  boost::json::value run_config;
  const distributed::Runtime* runtime = nullptr;
  std::vector<MimoModule> modules;                        // the encoder, then the language model
  std::vector<std::unique_ptr<Model>> models;             // by module; null where not here
  std::vector<std::unique_ptr<ParameterUpdate>> updates;  // by module; null where not here
  std::vector<std::unique_ptr<MimoBridge>> bridges;       // by encoder
  // By module, pipelined here: its stages' parameters, and the stages that hold a tied parameter
  // (the language model's embedding and output layer: Megatron's embedding group; else null).
  std::deque<PipelineStages> stages;  // a deque: the updates keep references to them
  std::vector<std::unique_ptr<distributed::Communicator>> tied_groups;
  std::vector<int64_t> patch_sizes;                       // by encoder
  std::unique_ptr<MimoData> data;
  int64_t steps = 0, microbatches = 1, micro_batch_size = 1;
  int64_t rows = 1;  // the global microbatch: micro_batch_size x the language model's dp
  int64_t eval_interval = 0, log_interval = 1, checkpoint_interval = 0, keep_last = 3, exit_interval = 0;
  int64_t first_step = 0;  // the step a resumed run continues from
  uint64_t seed = 0;
  bool zero_modalities = false;
  bool writer = true;  // world rank 0: metrics, progress, checkpoints
  std::filesystem::path output_dir;
  MetricsLog metrics;                     // world rank 0's metrics.jsonl and TensorBoard
  std::filesystem::path tensorboard_dir;  // train.tensorboard_dir; empty: none
  // train.trace: steps [trace_first, trace_end) (0-based) recorded on every rank, every module's
  // stage calls, the bridge's and the pipeline's waits, the reduction and the optimizer.
  std::unique_ptr<Timeline> timeline;
  int64_t trace_first = -1, trace_end = -1;

  MimoModule& language() { return modules.back(); }
  Model* language_model() { return models.back().get(); }
  std::size_t encoders() const { return modules.size() - 1; }
  double over_world(double value, distributed::ReduceOp op) const;

  // mimo_trainer.cpp: building.
  void read_settings();
  void build_module(std::size_t m);
  ModelOptions module_options(std::size_t m) const;
  const distributed::Communicator* expert_tensor_group() const;
  void check_module_model(const MimoModule& module, const Model& model) const;
  UpdateRanks module_update_ranks(std::size_t m, const Model& model);

  // mimo_step.cpp: a step.
  struct Microbatches {
    std::vector<std::vector<int64_t>> encoder_samples, language_samples;  // by microbatch
  };
  Microbatches start(int64_t first_index, int64_t count, bool training, bool validation);
  void run_microbatches(const Microbatches& mb, bool training);
  void forward(std::size_t module, uint32_t k, const Microbatches& mb);
  void backward(std::size_t module, uint32_t k);
  double finish_microbatches();  // the language model's loss over the job
  void reduce_gradients();
  void check_gradients_finite() const;
  double clip_norm() const;
  double train_step(int64_t step);

  // mimo_report.cpp: what the run tells, evaluation, checkpoints and stopping.
  struct Evaluation {
    double loss = 0, accuracy = 0;
    int64_t samples = 0;
    // The first held-out samples' predicted answers and true ones (token ids), for the report.
    std::vector<int64_t> examples, predicted, expected;
  };
  Evaluation evaluate();
  std::vector<double> module_parameters() const;
  void open_metrics();
  void write_metrics(const boost::json::object& record, const TrainerEvents& events);
  void report_start(const TrainerEvents& events);
  void report_step(int64_t step, double loss, double seconds, detail::Progress& progress,
                   const TrainerEvents& events);
  void report_eval(int64_t step, bool last, detail::Progress& progress, TrainResult& result,
                   const TrainerEvents& events);
  void save(int64_t step, detail::Progress& progress, TrainResult& result, const TrainerEvents& events);
  std::optional<Interruption> agreed_stop(const TrainerEvents& events, int64_t step) const;
  // mimo_trace.cpp: train.trace.
  void start_trace();
  void trace_before_step(int64_t step);
  void trace_after_step(int64_t step, const TrainerEvents& events);
  void stop_run(const Interruption& stop, bool saved, detail::Progress& progress, TrainResult& result,
                const TrainerEvents& events);

 private:
  int64_t tokens_per_step_ = 0;
};

}  // namespace plexus

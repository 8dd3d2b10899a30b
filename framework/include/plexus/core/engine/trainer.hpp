// The training loop of plexus-train: steps of microbatches through the scheduler, AdamW,
// evaluation, samples, metrics (JSON lines), progress and checkpoints.
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/data/blended_dataset.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/core/engine/optimizer.hpp"
#include "plexus/core/plugin_host.hpp"

namespace plexus {

// Where batches come from. Positions make resuming exact: the batch at a position is a pure
// function of (seed, position).
class DataSource {
 public:
  virtual ~DataSource() = default;
  // Fills the microbatch at global sample position `position` (sequences [position,
  // position + batch.tokens.shape()[0]) of the shuffled training stream).
  virtual void train_batch(uint64_t position, Batch& batch) = 0;
  // The i-th validation microbatch (fixed, unshuffled).
  virtual void validation_batch(uint64_t index, Batch& batch) = 0;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& tokens) const = 0;
};

// The Megatron data config of a run config: data.path's blend, data.split, data.cache_path,
// model.seq_length, run.seed, and Megatron's sizes: train.steps x the global batch
// (train.micro_batch_size x train.microbatches x data_parallel_size) training samples, and the
// train.eval_iters microbatches every evaluation reads; the test split is not built. Throws
// ConfigError naming the key of a value that cannot be used.
data::MegatronDataConfig megatron_data_config(const boost::json::value& run_config,
                                              int64_t data_parallel_size);

// The DataSource of a run config: the samples of megatron_data_config (data/blended_dataset.hpp)
// and the tokenizer of data.tokenizer (the byte tokenizer when empty). Before returning it checks
// that the tokenizer's vocabulary fits model.vocab_size and that each dataset's ids fit both (a
// scan of the ids, skipped for a .bin over 2 GiB). Throws plexus::DataError (the file and
// problem) or ConfigError (data.path empty, data.tokenizer unreadable, a vocabulary mismatch: the
// keys, files and numbers).
std::unique_ptr<DataSource> make_indexed_data_source(const boost::json::value& run_config,
                                                     int64_t data_parallel_size = 1);

// Refuses (ConfigError at distributed.topology) a topology whose groups belong to modules on
// grids of their own ("images/tp": the mimo provider): the trainer trains one model over one
// grid, MimoTrainer (mimo_trainer.hpp) a model of modules. The Trainer checks it; a program calls
// it first to say so before reading any data.
void require_one_model_grid(const distributed::Runtime& runtime);

struct TrainerEvents {
  // Called with each metrics record (also written to metrics.jsonl).
  std::function<void(const boost::json::object&)> on_metrics;
  // Polled before the first step, after every step but the last, and after each evaluation or
  // periodic checkpoint: a non-zero value (the number of a signal that asked the run to stop,
  // see StopSignals::received) stops the run there. Under data parallelism every rank polls
  // its own and the ranks agree by a collective (the largest value wins), so they all stop
  // after the same step. The trainer then writes a checkpoint of that step (unless one was
  // just written, or no step was run), an "interrupted" metrics record, and returns with
  // TrainResult::interrupted set. Unset: the run is never stopped early.
  std::function<int()> stop_signal;
};

// Why and where a run stopped before train.steps.
struct Interruption {
  int signal = 0;    // the agreed stop_signal value
  int32_t rank = 0;  // the lowest rank of the job (world rank) that asked to stop
  int64_t step = 0;  // steps done when it stopped; the checkpoint, if any, is of this step
};

struct TrainResult {
  int64_t steps_done = 0;
  std::vector<double> losses;  // per step run in this invocation
  std::optional<double> final_val_loss;
  std::filesystem::path last_checkpoint;    // empty when none was written
  std::optional<Interruption> interrupted;  // set when stop_signal stopped the run
  std::optional<int64_t> exited_at;         // the step train.exit_interval ended the run after
};

class Trainer {
 public:
  // With a distributed runtime of more than one data-parallel rank the trainer is data
  // parallel: each step's global batch (ranks x train.microbatches microbatches) is sharded by
  // data-parallel rank, gradients are averaged in buckets while backward runs, and only world
  // rank 0 writes metrics, progress, samples and checkpoints. `runtime` must outlive the trainer.
  Trainer(const PluginHost& host, boost::json::value run_config, std::unique_ptr<DataSource> data,
          const distributed::Runtime* runtime = nullptr);
  ~Trainer();
  // Loads parameters, optimizer state and the step from a checkpoint directory (resume).
  void resume_from(const std::filesystem::path& checkpoint);
  TrainResult run(const TrainerEvents& events = {});
  Model& model() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plexus

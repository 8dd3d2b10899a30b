// What a MIMO run tells its user and leaves on disk: metrics.jsonl (world rank 0's), the progress
// line, evaluation (the language model's loss and the accuracy of the answer token over the
// held-out samples, with example predictions), checkpoints, and stopping on a signal.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/mimo/mimo_checkpoint.hpp"
#include "engine/mimo/mimo_schedule.hpp"
#include "engine/mimo/mimo_trainer_impl.hpp"
#include "engine/stop_agreement.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/engine/stop_signals.hpp"
#include "plexus/core/json_text.hpp"

namespace plexus {
namespace {

// The index of the largest of `columns` floats.
int64_t argmax(const float* row, int64_t columns) {
  return std::max_element(row, row + columns) - row;
}

// Every row's logits at sequence position `at` over the whole padded vocabulary, [n][V]: the
// head's output 1 is [n, L, V / tp], each tp rank holding its consecutive share of the vocabulary
// (Megatron's vocab-parallel split), gathered over `tp` (collective; nullptr: not split).
std::vector<std::vector<float>> logits_at(const Tensor& head_logits, int64_t at,
                                          const distributed::Communicator* tp) {
  const Tensor logits = head_logits.to(DLDevice{kDLCPU, 0});
  const int64_t n = logits.shape()[0], length = logits.shape()[1], share = logits.shape()[2];
  Tensor mine({n, share}, plx_dtype_f32());
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(logits.data<float>() + (i * length + at) * share, share, mine.data<float>() + i * share);
  const int64_t parts = tp != nullptr ? tp->size() : 1;
  Tensor all({parts, n, share}, plx_dtype_f32());
  if (tp != nullptr)
    tp->all_gather(mine.view(), all.view());
  else
    all.copy_from(Tensor::borrowed(mine.raw(), {1, n, share}, plx_dtype_f32(), DLDevice{kDLCPU, 0}));
  std::vector<std::vector<float>> rows(static_cast<std::size_t>(n),
                                       std::vector<float>(static_cast<std::size_t>(parts * share)));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < parts; ++r)
      std::copy_n(all.data<float>() + (r * n + i) * share, share,
                  rows[static_cast<std::size_t>(i)].data() + r * share);
  return rows;
}

}  // namespace

void MimoTrainer::Impl::open_metrics() {
  if (writer) metrics.open(output_dir, tensorboard_dir);
}

void MimoTrainer::Impl::write_metrics(const boost::json::object& record, const TrainerEvents& events) {
  if (writer) metrics.write(record, events);
}

// Each module's parameters in all, on every rank (collective over the world): its first lane's
// leader of each stage counts the stage's whole tensors (a tied copy on its owner stage, an
// expert divided over ep once per ep rank).
std::vector<double> MimoTrainer::Impl::module_parameters() const {
  std::vector<double> counts(modules.size(), 0.0);
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here || modules[m].dp_rank != 0 || !modules[m].leader) continue;
    const ParameterStore& store = models[m]->parameters();
    const double ep = modules[m].ep != nullptr ? static_cast<double>(modules[m].ep->size()) : 1.0;
    for (std::size_t p = 0; p < store.size(); ++p) {
      if (!stages[m].owned.empty() && !stages[m].owned[p]) continue;
      counts[m] += static_cast<double>(store[p].whole_numel()) * (store[p].divided_over_ep() ? ep : 1.0);
    }
  }
  if (runtime != nullptr && runtime->world_size() > 1) {
    const Tensor view = Tensor::borrowed(counts.data(), {static_cast<int64_t>(counts.size())},
                                         plx_dtype_f64(), DLDevice{kDLCPU, 0});
    runtime->world().all_reduce(view.view(), distributed::ReduceOp::sum);
  }
  return counts;
}

void MimoTrainer::Impl::report_start(const TrainerEvents& events) {
  const std::vector<double> parameters = module_parameters();
  boost::json::array described;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    boost::json::object record{{"name", modules[m].name},
                               {"dp", modules[m].dp_size},
                               {"ranks", boost::json::value_from(modules[m].lane_rank)},
                               {"parameters", static_cast<int64_t>(parameters[m])},
                               {"stages", modules[m].stages}};
    if (models[m]) record["data_parallel"] = updates[m]->describe();  // the strategy's, or "component": null
    described.push_back(std::move(record));
  }
  boost::json::object start{{"event", "start"},
                            {"mimo", true},
                            {"steps", steps},
                            {"global_batch", rows * microbatches},
                            {"modules", std::move(described)}};
  // Modules on ranks of their own form one pipeline, each rank at its place (mimo_schedule.hpp):
  // what scripts/plot_trace.py compares a trace's bubbles with.
  const bool apart =
      std::count_if(modules.begin(), modules.end(), [](const MimoModule& m) { return m.here; }) == 1;
  if (apart)
    start["pipeline"] = {
        {"stages", mimo_pipeline_stages(modules)}, {"virtual_stages", 1}, {"microbatches", microbatches}};
  write_metrics(start, events);
  // Every sample has the same tokens: the language model's input of one, times the samples.
  tokens_per_step_ =
      rows * microbatches * data->language_batch(data->train_samples(0, 1, 0, 1)).tokens.numel();
}

void MimoTrainer::Impl::report_step(int64_t step, double loss, double seconds, detail::Progress& progress,
                                    const TrainerEvents& events) {
  double lr = 0;
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) lr = updates[m]->last_lr();
  const double tokens_per_s = static_cast<double>(tokens_per_step_) / seconds;
  write_metrics({{"event", "step"},
                 {"step", step + 1},
                 {"loss", loss},
                 {"lr", lr},
                 {"tokens_per_s", tokens_per_s},
                 {"step_seconds", seconds}},
                events);
  if (writer) progress.step(step, loss, lr, tokens_per_s, -1);
}

// The held-out samples in validation microbatches of `rows`: the language model's loss and how
// often it names the answer (the argmax at the place before manifest.answer_position).
MimoTrainer::Impl::Evaluation MimoTrainer::Impl::evaluate() {
  Evaluation out;
  const int64_t batches = data->valid_batches(rows);
  const int64_t answer = data->manifest().answer_position;
  const auto vocabulary = static_cast<int64_t>(data->manifest().vocabulary.size());
  double loss = 0, correct = 0;
  // The first kExamples held-out samples are batch 0's first rows, on language lane 0.
  constexpr int64_t kExamples = 6;
  std::vector<double> examples(3 * kExamples, -1.0);  // sample, predicted, expected
  for (int64_t b = 0; b < batches; ++b) {
    const Microbatches mb = start(b, 1, false, true);
    run_microbatches(mb, false);
    if (language().here && language().last_stage() && answer > 0) {  // the head's stage
      const std::vector<std::vector<float>> logits =
          logits_at(language_model()->head_output(0, 0, 1), answer - 1, language().tp);
      const std::vector<int64_t>& lane = mb.language_samples[0];
      for (std::size_t i = 0; i < logits.size() && language().leader; ++i) {
        const int64_t predicted =
            argmax(logits[i].data(), std::min<int64_t>(vocabulary, static_cast<int64_t>(logits[i].size())));
        const int32_t expected = data->answer(lane[i]);
        if (predicted == expected) correct += 1;
        if (b == 0 && language().dp_rank == 0 && i < static_cast<std::size_t>(kExamples)) {
          examples[3 * i] = static_cast<double>(lane[i]);
          examples[3 * i + 1] = static_cast<double>(predicted);
          examples[3 * i + 2] = static_cast<double>(expected);
        }
      }
    }
    loss += finish_microbatches();
  }
  if (runtime != nullptr && runtime->world_size() > 1) {
    const Tensor view = Tensor::borrowed(examples.data(), {static_cast<int64_t>(examples.size())},
                                         plx_dtype_f64(), DLDevice{kDLCPU, 0});
    runtime->world().all_reduce(view.view(), distributed::ReduceOp::max);
  }
  for (std::size_t i = 0; i + 2 < examples.size() && examples[i] >= 0; i += 3) {
    out.examples.push_back(static_cast<int64_t>(examples[i]));
    out.predicted.push_back(static_cast<int64_t>(examples[i + 1]));
    out.expected.push_back(static_cast<int64_t>(examples[i + 2]));
  }
  out.samples = batches * rows;
  out.loss = loss / static_cast<double>(std::max<int64_t>(1, batches));
  out.accuracy = over_world(correct, distributed::ReduceOp::sum) /
                 static_cast<double>(std::max<int64_t>(1, out.samples));
  return out;
}

void MimoTrainer::Impl::report_eval(int64_t step, bool last, detail::Progress& progress, TrainResult& result,
                                    const TrainerEvents& events) {
  const Evaluation e = evaluate();
  result.final_val_loss = e.loss;
  const std::vector<std::string>& words = data->manifest().vocabulary;
  const auto word = [&](int64_t id) {
    return id >= 0 && id < static_cast<int64_t>(words.size()) ? words[static_cast<std::size_t>(id)]
                                                              : std::to_string(id);
  };
  boost::json::array examples;
  std::string shown = "  held-out samples:";
  for (std::size_t i = 0; i < e.examples.size(); ++i) {
    examples.push_back(boost::json::object{
        {"sample", e.examples[i]}, {"predicted", word(e.predicted[i])}, {"expected", word(e.expected[i])}});
    shown.append(i > 0 ? ", " : " ")
        .append(std::to_string(e.examples[i]))
        .append(" \"")
        .append(word(e.predicted[i]));
    shown.append("\"");
    if (e.predicted[i] != e.expected[i]) shown.append(" (is ").append(word(e.expected[i])).append(")");
  }
  write_metrics({{"event", "eval"},
                 {"step", step},
                 {"val_loss", e.loss},
                 {"val_accuracy", e.accuracy},
                 {"val_samples", e.samples},
                 {"examples", std::move(examples)}},
                events);
  if (!writer) return;
  char text[160];
  std::snprintf(text, sizeof(text),
                "eval at step %lld: val_loss %.6f, val_accuracy %.4f (%lld held-out samples)",
                static_cast<long long>(step), e.loss, e.accuracy, static_cast<long long>(e.samples));
  progress.line(text);
  if (last) progress.line(shown);
}

void MimoTrainer::Impl::save(int64_t step, detail::Progress& progress, TrainResult& result,
                             const TrainerEvents& events) {
  const boost::json::object state{{"step", step}, {"mimo", true}, {"config", run_config}};
  const std::filesystem::path root = output_dir / "checkpoints";
  const std::filesystem::path dir =
      save_mimo_checkpoint(root, step, modules, models, updates, stages, runtime, state);
  if (!writer) return;
  checkpoint::prune_checkpoints(root, std::max<int64_t>(1, keep_last));
  result.last_checkpoint = dir;
  write_metrics({{"event", "checkpoint"}, {"step", step}, {"dir", dir.string()}}, events);
  progress.line("checkpoint: " + dir.string());
}

std::optional<Interruption> MimoTrainer::Impl::agreed_stop(const TrainerEvents& events, int64_t step) const {
  return agree_on_stop(events, runtime, step);
}

// Every rank stops after the same step, with a checkpoint of it (unless one was just written).
void MimoTrainer::Impl::stop_run(const Interruption& stop, bool saved, detail::Progress& progress,
                                 TrainResult& result, const TrainerEvents& events) {
  if (writer)
    progress.line(signal_name(stop.signal) + " received (first by rank " + std::to_string(stop.rank) +
                  "): stopping after step " + std::to_string(stop.step) + ", writing a checkpoint");
  if (!saved) save(stop.step, progress, result, events);
  write_metrics({{"event", "interrupted"},
                 {"step", stop.step},
                 {"signal", signal_name(stop.signal)},
                 {"rank", stop.rank},
                 {"checkpoint", result.last_checkpoint.string()}},
                events);
  result.interrupted = stop;
}

}  // namespace plexus

// The MIMO training loop (plexus/core/engine/mimo_trainer.hpp). A step reads as Megatron's
// multi-module 1F1B with one stage per module: for each microbatch, every encoder lane runs its
// forward and hands its outputs over the bridge to the language lanes whose samples they are; the
// language lane splices them into its input, runs forward and backward, and hands the spliced
// rows' gradients back; the encoder lanes run their backward. Then each module averages its
// gradients over its own data-parallel lanes, every rank agrees whether a gradient is not finite,
// and every module clips by one norm over all modules' gradients (Megatron's MimoOptimizer: the
// modules' squared norms, the world's maximum of each, their sum) before its AdamW step.
#include "plexus/core/engine/mimo_trainer.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <algorithm>

#include "engine/mimo/mimo_bridge.hpp"
#include "engine/mimo/mimo_checkpoint.hpp"
#include "engine/mimo/mimo_data.hpp"
#include "engine/mimo/mimo_modules.hpp"
#include "engine/parameter_update.hpp"
#include "engine/progress.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/core/engine/optimizer.hpp"
#include "plexus/core/engine/stop_signals.hpp"
#include "plexus/core/json_text.hpp"
#include "plexus/core/logging.hpp"

namespace plexus {
namespace {

int64_t train_int(const boost::json::value& rc, const char* key) {
  return rc.at("train").at(key).to_number<int64_t>();
}

// The patch size of an encoder's embedding (its options.patch_size), which cuts the images.
int64_t patch_size_of(const MimoModule& m) {
  const auto& options = m.run_config.at("model").at("embedding").at("options");
  const auto* patch = options.is_object() ? options.as_object().if_contains("patch_size") : nullptr;
  if (patch == nullptr || !patch->is_number())
    throw config::ConfigError(m.path + ".model.embedding.options.patch_size",
                              "an encoder's embedding must say its patch_size (a patch embedding such as "
                              "vision.patch_embedding): the images are cut into patches of that size");
  return patch->to_number<int64_t>();
}

// The index of the largest of `columns` floats.
int64_t argmax(const float* row, int64_t columns) {
  int64_t best = 0;
  for (int64_t v = 1; v < columns; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}

}  // namespace

struct MimoTrainer::Impl {
  const PluginHost* host = nullptr;
  boost::json::value run_config;
  const distributed::Runtime* runtime = nullptr;
  std::vector<MimoModule> modules;                        // encoders, then the language model
  std::vector<std::unique_ptr<Model>> models;             // by module; null where not here
  std::vector<std::unique_ptr<ParameterUpdate>> updates;  // by module; null where not here
  std::vector<std::unique_ptr<MimoBridge>> bridges;       // by encoder
  std::vector<int64_t> patch_sizes;                       // by encoder
  std::unique_ptr<MimoData> data;
  int64_t steps = 0, microbatches = 1, micro_batch_size = 1, rows = 1;  // rows: the global microbatch
  int64_t eval_interval = 0, log_interval = 1, checkpoint_interval = 0, keep_last = 3;
  int64_t first_step = 0;     // the step a resumed run continues from
  int64_t exit_interval = 0;  // train.exit_interval
  uint64_t seed = 0;
  bool zero_modalities = false;
  bool writer = true;
  std::filesystem::path output_dir;
  std::ofstream metrics;

  MimoModule& language() { return modules.back(); }
  Model* language_model() { return models.back().get(); }
  std::size_t encoders() const { return modules.size() - 1; }

  double over_world(double value, distributed::ReduceOp op) const {
    return runtime == nullptr || runtime->world_size() == 1 ? value : runtime->world().all_reduce(value, op);
  }
  void write_metrics(const boost::json::object& record, const TrainerEvents& events) {
    if (!writer) return;
    metrics << json_text(record) << '\n';
    metrics.flush();
    if (!metrics)
      throw std::runtime_error((output_dir / "metrics.jsonl").string() + ": cannot write a record");
    if (events.on_metrics) events.on_metrics(record);
  }

  struct Microbatches {
    std::vector<std::vector<int64_t>> encoder_samples, language_samples;  // by microbatch
  };
  Microbatches start(int64_t first_index, int64_t count, bool training, bool validation);
  double run_microbatch(const Microbatches& mb, uint32_t k, bool training);
  double train_step(int64_t step);
  void reduce_gradients();
  double clip_norm() const;
  struct Evaluation {
    double loss = 0, accuracy = 0;
    int64_t samples = 0;
    // The first held-out samples' predicted answers and true ones (token ids), for the report.
    std::vector<int64_t> examples, predicted, expected;
  };
  Evaluation evaluate();
};

MimoTrainer::MimoTrainer(const PluginHost& host, boost::json::value run_config,
                         const distributed::Runtime* runtime)
    : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.host = &host;
  t.run_config = std::move(run_config);
  t.runtime = runtime;
  const auto& rc = t.run_config;
  if (rc.at("run").at("device").as_string() != "cpu")
    throw config::ConfigError("run.device", "a MIMO model trains on the CPU so far (\"cpu\")");
  t.steps = train_int(rc, "steps");
  t.microbatches = train_int(rc, "microbatches");
  t.micro_batch_size = train_int(rc, "micro_batch_size");
  t.eval_interval = train_int(rc, "eval_interval");
  t.log_interval = std::max<int64_t>(1, train_int(rc, "log_interval"));
  t.checkpoint_interval = rc.at("checkpoint").at("interval").to_number<int64_t>();
  t.keep_last = rc.at("checkpoint").at("keep_last").to_number<int64_t>();
  t.exit_interval = train_int(rc, "exit_interval");
  t.seed = static_cast<uint64_t>(rc.at("run").at("seed").to_number<int64_t>());
  t.output_dir = std::string(rc.at("run").at("output_dir").as_string());
  t.writer = runtime == nullptr || runtime->rank() == 0;
  if (const auto* z = rc.at("mimo").as_object().if_contains("zero_modalities"); z != nullptr && z->is_bool())
    t.zero_modalities = z->as_bool();

  t.modules = mimo_modules(rc, runtime);
  const std::string path(rc.at("data").at("path").is_string() ? rc.at("data").at("path").as_string() : "");
  if (path.empty())
    throw config::ConfigError("data.path",
                              "a MIMO model trains on a multimodal dataset: give its PREFIX "
                              "(plexus data digits --output-prefix PREFIX makes one)");
  t.data = std::make_unique<MimoData>(path, t.seed);
  t.rows = t.micro_batch_size * t.language().dp_size;

  // The models: each module's own, with its parameter names; the language model splices every
  // encoder's special token.
  std::vector<int32_t> special;
  for (std::size_t e = 0; e < t.encoders(); ++e) special.push_back(t.modules[e].special_token);
  const data::MultimodalManifest& manifest = t.data->manifest();
  for (std::size_t e = 0; e < t.encoders(); ++e)
    if (t.modules[e].special_token != manifest.special_token)
      throw config::ConfigError(t.modules[e].path + ".special_token_id",
                                std::to_string(t.modules[e].special_token) + ", but " + path +
                                    " puts the image's embeddings at token " +
                                    std::to_string(manifest.special_token));
  const OptimizerSettings optimizer = OptimizerSettings::from_run_config(rc);
  for (std::size_t m = 0; m < t.modules.size(); ++m) {
    const MimoModule& module = t.modules[m];
    if (module.encoder) t.patch_sizes.push_back(patch_size_of(module));
    if (!module.here) {
      t.models.emplace_back();
      t.updates.emplace_back();
      continue;
    }
    // Its layers find their module's groups ("tp" is "<module>/tp") while it is built and run.
    const distributed::ModuleGroupScope scope(module.name);
    ModelOptions options;
    options.name_prefix = module.name_prefix;
    options.head_name_prefix = module.head_name_prefix;
    options.tensor_group = module.tp;
    if (!module.encoder) options.splice_tokens = special;
    t.models.push_back(std::make_unique<Model>(host, module.run_config, options));
    Model& model = *t.models.back();
    if (module.encoder == model.produces_loss())
      throw config::ConfigError(
          module.encoder ? module.path + ".model.head.component" : "model.head.component",
          module.encoder ? "an encoder's head must hand its output on (an input projection "
                           "such as vision.projection), not produce a loss"
                         : "the language model's head must produce the loss");
    UpdateRanks ranks;
    if (const distributed::Communicator* tp = module.tp; tp != nullptr)
      ranks.sum_over_tp = [tp](double local) { return tp->all_reduce(local, distributed::ReduceOp::sum); };
    t.updates.push_back(make_whole_update(model, optimizer, ranks));
    model.initialize(t.seed);
  }
  const int64_t hidden = rc.at("model").at("hidden_size").to_number<int64_t>();
  for (std::size_t e = 0; e < t.encoders(); ++e)
    t.bridges.push_back(std::make_unique<MimoBridge>(t.modules[e], t.language(), runtime, t.rows,
                                                     manifest.tokens_per_image, hidden,
                                                     static_cast<int32_t>(100 + 2 * e)));
}

MimoTrainer::~MimoTrainer() = default;

void MimoTrainer::resume_from(const std::filesystem::path& checkpoint) {
  Impl& t = *impl_;
  t.first_step = load_mimo_checkpoint(checkpoint, t.modules, t.models, t.updates);
  if (t.first_step > t.steps)
    throw config::ConfigError("train.steps", std::to_string(t.steps) + " steps, but " + checkpoint.string() +
                                                 " is of step " + std::to_string(t.first_step));
  if (t.writer)
    log_info("mimo", "resumed from " + checkpoint.string() + " at step " + std::to_string(t.first_step));
}

// Starts `count` microbatches (training ones from index first_index of the run, or validation
// ones) on every model here: each lane reads its rows of each global microbatch.
MimoTrainer::Impl::Microbatches MimoTrainer::Impl::start(int64_t first_index, int64_t count, bool training,
                                                         bool validation) {
  Microbatches mb;
  mb.encoder_samples.resize(static_cast<std::size_t>(count));
  mb.language_samples.resize(static_cast<std::size_t>(count));
  const auto samples = [&](int64_t index, int64_t first, int64_t n) {
    return validation ? data->valid_samples(index, rows, first, n)
                      : data->train_samples(index, rows, first, n);
  };
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here) continue;
    const distributed::ModuleGroupScope scope(modules[m].name);
    const bool encoder = modules[m].encoder;
    const int64_t lane_rows = rows / modules[m].dp_size;
    std::vector<Batch> batches;
    for (int64_t k = 0; k < count; ++k) {
      std::vector<int64_t> ids = samples(first_index + k, modules[m].dp_rank * lane_rows, lane_rows);
      batches.push_back(encoder ? data->encoder_batch(ids, patch_sizes[m]) : data->language_batch(ids));
      (encoder ? mb.encoder_samples : mb.language_samples)[static_cast<std::size_t>(k)] = std::move(ids);
    }
    models[m]->start_microbatches(batches, training);
  }
  return mb;
}

// One microbatch through every module here: the encoders' forward, the bridge, the language
// model's forward (and backward), the bridge back, the encoders' backward. Returns nothing of
// the loss: the language model keeps it until finish_microbatches.
double MimoTrainer::Impl::run_microbatch(const Microbatches& mb, uint32_t k, bool training) {
  std::vector<Tensor> spliced(encoders());
  for (std::size_t e = 0; e < encoders(); ++e) {
    Tensor output;
    if (modules[e].here) {
      const distributed::ModuleGroupScope scope(modules[e].name);
      models[e]->forward_chunk(0, k);
      output = models[e]->take_chunk_output(0, k);
      if (zero_modalities) output.zero();
    }
    spliced[e] = bridges[e]->forward(output, mb.encoder_samples[k], mb.language_samples[k]);
  }
  Model* lm = language_model();
  std::vector<Tensor> grads(encoders());
  if (language().here) {
    const distributed::ModuleGroupScope scope(language().name);
    for (std::size_t e = 0; e < encoders(); ++e) lm->set_splice(0, k, e, std::move(spliced[e]));
    lm->forward_chunk(0, k);
    if (training) {
      lm->backward_chunk(0, k);
      for (std::size_t e = 0; e < encoders(); ++e) {
        grads[e] = lm->take_splice_grad(0, k, e);
        if (zero_modalities) grads[e].zero();  // zeros depend on no encoder weight
      }
    }
  }
  if (!training) return 0;
  for (std::size_t e = 0; e < encoders(); ++e) {
    Tensor grad = bridges[e]->backward(grads[e]);
    if (!modules[e].here) continue;
    const distributed::ModuleGroupScope scope(modules[e].name);
    models[e]->set_chunk_output_grad(0, k, std::move(grad));
    models[e]->backward_chunk(0, k);
  }
  return 0;
}

// Each module's gradients averaged over its data-parallel lanes (its own dp group).
void MimoTrainer::Impl::reduce_gradients() {
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here || modules[m].dp == nullptr) continue;
    ParameterStore& store = models[m]->parameters();
    for (std::size_t p = 0; p < store.size(); ++p)
      if (!store[p].is_buffer()) modules[m].dp->all_reduce(store[p].grad.view(), distributed::ReduceOp::avg);
  }
}

// Megatron's MimoOptimizer: a vector of the modules' squared gradient norms (0 for a module not
// here), its maximum over the world (a module's ranks agree on its norm), summed: one norm.
double MimoTrainer::Impl::clip_norm() const {
  std::vector<double> squares(modules.size(), 0.0);
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) squares[m] = updates[m]->squared_gradient_norm();
  if (runtime != nullptr && runtime->world_size() > 1) {
    const Tensor view = Tensor::borrowed(squares.data(), {static_cast<int64_t>(squares.size())},
                                         plx_dtype_f64(), DLDevice{kDLCPU, 0});
    runtime->world().all_reduce(view.view(), distributed::ReduceOp::max);
  }
  double total = 0;
  for (double s : squares) total += s;
  return std::sqrt(total);
}

double MimoTrainer::Impl::train_step(int64_t step) {
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) updates[m]->begin_step(microbatches);
  const Microbatches mb = start(step * microbatches, microbatches, true, false);
  for (uint32_t k = 0; k < static_cast<uint32_t>(microbatches); ++k) run_microbatch(mb, k, true);
  double loss = 0;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here) continue;
    const double l = models[m]->finish_microbatches();
    // The lane's loss, once (its tp ranks all have it).
    if (!modules[m].encoder && modules[m].leader) loss = l / static_cast<double>(language().dp_size);
  }
  reduce_gradients();
  // Every rank stops together when any finds a non-finite gradient (Megatron's found_inf, MAX
  // over the world), naming it on the rank that found it.
  std::string found;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    if (!modules[m].here || !found.empty()) continue;
    try {
      updates[m]->check_gradients_finite();
    } catch (const NonFiniteError& e) {
      found = modules[m].name + ": " + e.what();
    }
  }
  if (over_world(found.empty() ? 0.0 : 1.0, distributed::ReduceOp::max) > 0)
    throw NonFiniteError(found.empty() ? "a non-finite gradient on another rank (its message names it)"
                                       : found);
  const double norm = clip_norm();
  for (std::size_t m = 0; m < modules.size(); ++m)
    if (modules[m].here) updates[m]->apply_with_norm(step, norm);
  return over_world(loss, distributed::ReduceOp::sum);
}

// The held-out samples in validation microbatches of `rows`: the language model's loss and how
// often it names the digit (the argmax at the place before manifest.answer_position).
MimoTrainer::Impl::Evaluation MimoTrainer::Impl::evaluate() {
  Evaluation out;
  const int64_t batches = data->valid_batches(rows);
  const data::MultimodalManifest& manifest = data->manifest();
  double loss = 0, correct = 0;
  // The first kExamples held-out samples are batch 0's first rows, on language lane 0.
  constexpr int64_t kExamples = 6;
  std::vector<double> examples(3 * kExamples, -1.0);
  for (int64_t b = 0; b < batches; ++b) {
    const Microbatches mb = start(b, 1, false, true);
    run_microbatch(mb, 0, false);
    if (language().here && manifest.answer_position > 0) {
      // The logits at the answer's place: [n, padded vocab / tp] here, each tp rank holding its
      // consecutive share of the vocabulary (Megatron's vocab-parallel split), gathered.
      const Tensor logits = language_model()->head_output(0, 0, 1).to(DLDevice{kDLCPU, 0});  // [n, L, V / tp]
      const int64_t n = logits.shape()[0], length = logits.shape()[1], share = logits.shape()[2];
      const int64_t at = manifest.answer_position - 1;
      Tensor answers({n, share}, plx_dtype_f32());
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(logits.data<float>() + (i * length + at) * share, share,
                    answers.data<float>() + i * share);
      const int64_t parts = language().tp != nullptr ? language().tp->size() : 1;
      Tensor gathered({parts, n, share}, plx_dtype_f32());
      if (parts > 1)
        language().tp->all_gather(answers.view(), gathered.view());
      else
        gathered.copy_from(
            Tensor::borrowed(answers.raw(), {1, n, share}, plx_dtype_f32(), DLDevice{kDLCPU, 0}));
      const auto vocab = std::min<int64_t>(parts * share, static_cast<int64_t>(manifest.vocabulary.size()));
      const auto& lane = mb.language_samples[0];
      std::vector<float> row(static_cast<std::size_t>(parts * share));
      for (int64_t i = 0; i < n && language().leader; ++i) {
        for (int64_t r = 0; r < parts; ++r)
          std::copy_n(gathered.data<float>() + (r * n + i) * share, share, row.data() + r * share);
        const int64_t predicted = argmax(row.data(), vocab);
        const Batch one = data->language_batch({lane[static_cast<std::size_t>(i)]});
        const int32_t expected = one.targets.data<int32_t>()[at];
        if (predicted == expected) correct += 1;
        if (b == 0 && language().dp_rank == 0 && i < kExamples) {
          examples[static_cast<std::size_t>(3 * i)] = static_cast<double>(lane[static_cast<std::size_t>(i)]);
          examples[static_cast<std::size_t>(3 * i + 1)] = static_cast<double>(predicted);
          examples[static_cast<std::size_t>(3 * i + 2)] = static_cast<double>(expected);
        }
      }
    }
    for (std::size_t m = 0; m < modules.size(); ++m) {
      if (!modules[m].here) continue;
      const double l = models[m]->finish_microbatches();
      if (!modules[m].encoder && modules[m].leader) loss += l / static_cast<double>(language().dp_size);
    }
  }
  if (runtime != nullptr && runtime->world_size() > 1) {
    const Tensor view = Tensor::borrowed(examples.data(), {static_cast<int64_t>(examples.size())},
                                         plx_dtype_f64(), DLDevice{kDLCPU, 0});
    runtime->world().all_reduce(view.view(), distributed::ReduceOp::max);
  }
  for (int64_t i = 0; i < kExamples && examples[static_cast<std::size_t>(3 * i)] >= 0; ++i) {
    out.examples.push_back(static_cast<int64_t>(examples[static_cast<std::size_t>(3 * i)]));
    out.predicted.push_back(static_cast<int64_t>(examples[static_cast<std::size_t>(3 * i + 1)]));
    out.expected.push_back(static_cast<int64_t>(examples[static_cast<std::size_t>(3 * i + 2)]));
  }
  out.samples = batches * rows;
  out.loss =
      over_world(loss, distributed::ReduceOp::sum) / static_cast<double>(std::max<int64_t>(1, batches));
  out.accuracy = over_world(correct, distributed::ReduceOp::sum) /
                 static_cast<double>(std::max<int64_t>(1, out.samples));
  return out;
}

TrainResult MimoTrainer::run(const TrainerEvents& events) {
  Impl& t = *impl_;
  TrainResult result;
  if (t.writer) {
    std::filesystem::create_directories(t.output_dir);
    t.metrics.open(t.output_dir / "metrics.jsonl", std::ios::app);
    if (!t.metrics)
      throw std::runtime_error("cannot write metrics to " + (t.output_dir / "metrics.jsonl").string());
  }
  boost::json::array modules;
  for (std::size_t m = 0; m < t.modules.size(); ++m) {
    const MimoModule& module = t.modules[m];
    boost::json::object record{
        {"name", module.name}, {"dp", module.dp_size}, {"ranks", boost::json::value_from(module.lane_rank)}};
    if (t.models[m]) {
      int64_t parameters = 0;
      for (std::size_t p = 0; p < t.models[m]->parameters().size(); ++p)
        parameters += t.models[m]->parameters()[p].numel();
      record["parameters"] = parameters;
    }
    modules.push_back(std::move(record));
  }
  t.write_metrics({{"event", "start"},
                   {"mimo", true},
                   {"steps", t.steps},
                   {"global_batch", t.rows * t.microbatches},
                   {"modules", std::move(modules)}},
                  events);
  const int64_t tokens_per_step =
      t.rows * t.microbatches *
      static_cast<int64_t>(t.data->language_batch(t.data->train_samples(0, 1, 0, 1)).tokens.numel());
  detail::Progress progress(t.first_step, t.steps, t.log_interval);
  const auto save = [&](int64_t done) {
    const boost::json::object state{{"step", done}, {"mimo", true}, {"config", t.run_config}};
    const std::filesystem::path root = t.output_dir / "checkpoints";
    const std::filesystem::path dir =
        save_mimo_checkpoint(root, done, t.modules, t.models, t.updates, t.runtime, state);
    if (t.writer) {
      checkpoint::prune_checkpoints(root, std::max<int64_t>(1, t.keep_last));
      result.last_checkpoint = dir;
      t.write_metrics({{"event", "checkpoint"}, {"step", done}, {"dir", dir.string()}}, events);
      progress.line("checkpoint: " + dir.string());
    }
  };
  for (int64_t step = t.first_step; step < t.steps; ++step) {
    const auto began = std::chrono::steady_clock::now();
    const double loss = t.train_step(step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    result.losses.push_back(loss);
    result.steps_done = step + 1;
    double lr = 0;
    for (std::size_t m = 0; m < t.modules.size(); ++m)
      if (t.modules[m].here) lr = t.updates[m]->last_lr();
    const double tokens_per_s = static_cast<double>(tokens_per_step) / seconds;
    t.write_metrics({{"event", "step"},
                     {"step", step + 1},
                     {"loss", loss},
                     {"lr", lr},
                     {"tokens_per_s", tokens_per_s},
                     {"step_seconds", seconds}},
                    events);
    if (t.writer) progress.step(step, loss, lr, tokens_per_s, -1);
    const bool last = step + 1 == t.steps;
    if (last || (t.eval_interval > 0 && (step + 1) % t.eval_interval == 0)) {
      const Impl::Evaluation e = t.evaluate();
      result.final_val_loss = e.loss;
      const std::vector<std::string>& words = t.data->manifest().vocabulary;
      const auto word = [&](int64_t id) {
        return id >= 0 && id < static_cast<int64_t>(words.size()) ? words[static_cast<std::size_t>(id)]
                                                                  : std::to_string(id);
      };
      boost::json::array examples;
      for (std::size_t i = 0; i < e.examples.size(); ++i)
        examples.push_back(boost::json::object{{"sample", e.examples[i]},
                                               {"predicted", word(e.predicted[i])},
                                               {"expected", word(e.expected[i])}});
      t.write_metrics({{"event", "eval"},
                       {"step", step + 1},
                       {"val_loss", e.loss},
                       {"val_accuracy", e.accuracy},
                       {"val_samples", e.samples},
                       {"examples", examples}},
                      events);
      if (t.writer) {
        char text[160];
        std::snprintf(
            text, sizeof(text), "eval at step %lld: val_loss %.6f, val_accuracy %.4f (%lld held-out samples)",
            static_cast<long long>(step + 1), e.loss, e.accuracy, static_cast<long long>(e.samples));
        progress.line(text);
        if (last) {
          std::string shown = "  held-out samples:";
          for (std::size_t i = 0; i < e.examples.size(); ++i) {
            shown.append(" ")
                .append(std::to_string(e.examples[i]))
                .append(" \"")
                .append(word(e.predicted[i]));
            shown.append("\"");
            if (e.predicted[i] != e.expected[i])
              shown.append(" (is ").append(word(e.expected[i])).append(")");
            if (i + 1 < e.examples.size()) shown.append(",");
          }
          progress.line(shown);
        }
      }
    }
    const bool exit = !last && t.exit_interval > 0 && (step + 1) % t.exit_interval == 0;
    if (last || exit || (t.checkpoint_interval > 0 && (step + 1) % t.checkpoint_interval == 0))
      save(step + 1);
    if (exit) {  // Megatron's --exit-interval: continue with --resume latest
      result.exited_at = step + 1;
      t.write_metrics({{"event", "exit"}, {"step", step + 1}}, events);
      break;
    }
    // A stop signal (SIGTERM, SIGINT) on any rank: every rank stops after this step, with a
    // checkpoint of it (the plain trainer's agreement, trainer_stop.cpp).
    if (!last && events.stop_signal) {
      const int mine = events.stop_signal();
      const auto agreed = static_cast<int>(t.over_world(mine, distributed::ReduceOp::max));
      if (agreed != 0) {
        const int32_t me = t.runtime != nullptr ? t.runtime->rank() : 0;
        const int32_t world = t.runtime != nullptr ? t.runtime->world_size() : 1;
        const auto first = static_cast<int32_t>(
            t.over_world(static_cast<double>(mine != 0 ? me : world), distributed::ReduceOp::min));
        if (t.writer)
          progress.line(signal_name(agreed) + " received (first by rank " + std::to_string(first) +
                        "): stopping after step " + std::to_string(step + 1) + ", writing a checkpoint");
        const bool saved = t.checkpoint_interval > 0 && (step + 1) % t.checkpoint_interval == 0;
        if (!saved) save(step + 1);
        t.write_metrics({{"event", "interrupted"},
                         {"step", step + 1},
                         {"signal", signal_name(agreed)},
                         {"rank", first},
                         {"checkpoint", result.last_checkpoint.string()}},
                        events);
        result.interrupted = Interruption{agreed, first, step + 1};
        break;
      }
    }
  }
  if (t.writer) progress.finish();
  return result;
}

}  // namespace plexus

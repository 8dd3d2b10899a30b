// The MIMO training loop (plexus/core/engine/mimo_trainer.hpp): the modules this rank runs built
// from their run configs, then `for step: train_step -> report -> maybe evaluate -> maybe
// checkpoint -> exit or agreed stop`. A step is mimo_step.cpp's; what the run tells and writes,
// mimo_report.cpp's.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "engine/mimo/mimo_checkpoint.hpp"
#include "engine/mimo/mimo_trainer_impl.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/engine/pipeline_layout.hpp"
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

}  // namespace

double MimoTrainer::Impl::over_world(double value, distributed::ReduceOp op) const {
  return runtime == nullptr || runtime->world_size() == 1 ? value : runtime->world().all_reduce(value, op);
}

void MimoTrainer::Impl::read_settings() {
  const auto& rc = run_config;
  if (rc.at("run").at("device").as_string() != "cpu")
    throw config::ConfigError("run.device", "a MIMO model trains on the CPU so far (\"cpu\")");
  steps = train_int(rc, "steps");
  microbatches = train_int(rc, "microbatches");
  micro_batch_size = train_int(rc, "micro_batch_size");
  eval_interval = train_int(rc, "eval_interval");
  log_interval = std::max<int64_t>(1, train_int(rc, "log_interval"));
  exit_interval = train_int(rc, "exit_interval");
  checkpoint_interval = rc.at("checkpoint").at("interval").to_number<int64_t>();
  keep_last = rc.at("checkpoint").at("keep_last").to_number<int64_t>();
  seed = static_cast<uint64_t>(rc.at("run").at("seed").to_number<int64_t>());
  output_dir = std::string(rc.at("run").at("output_dir").as_string());
  tensorboard_dir = std::string(rc.at("train").at("tensorboard_dir").as_string());
  writer = runtime == nullptr || runtime->rank() == 0;
  zero_modalities = rc.at("mimo").at("zero_modalities").as_bool();
  if (rc.at("train").at("profile").as_bool())
    throw config::ConfigError("train.profile",
                              "a MIMO run has no step profile yet; train.trace records every module's "
                              "forward and backward per microbatch on every rank (docs/mimo.md)");
  if (const int64_t traced = rc.at("train").at("trace").at("steps").to_number<int64_t>(); traced > 0) {
    trace_first = rc.at("train").at("trace").at("first_step").to_number<int64_t>() - 1;
    trace_end = trace_first + traced;
  }
}

// The expert grid's tp group of the module in scope (its expt_tp; Megatron's MIMO leaves it 1
// unless set), when of more than one rank.
const distributed::Communicator* MimoTrainer::Impl::expert_tensor_group() const {
  const distributed::Communicator* etp = runtime != nullptr ? runtime->group("expert_tp") : nullptr;
  return etp != nullptr && etp->size() > 1 ? etp : nullptr;
}

// Module m's model options on this rank: its names and splice tokens (module_model_options), its
// groups, and, pipelined, its stage's chunk.
ModelOptions MimoTrainer::Impl::module_options(std::size_t m) const {
  const MimoModule& module = modules[m];
  ModelOptions options = module_model_options(modules, m);
  options.tensor_group = module.tp;
  options.expert_tensor_group = expert_tensor_group();
  // More than one lane: the data-parallel strategy of distributed.data_parallel holds the
  // module's parameters over its own dp group (Megatron's MIMO runs a distributed optimizer per
  // module), so none is allocated whole here.
  options.deferred_parameters = module.dp != nullptr;
  if (module.pp == nullptr) return options;
  const PipelineLayout layout = [&] {
    try {
      return pipeline_layout(plan_decoder(*host, module.run_config),
                             PipelineSettings::from_run_config(module.run_config),
                             static_cast<uint32_t>(module.stages));
    } catch (const config::ConfigError& e) {
      // The stages' count is the module's pp: say whose.
      std::vector<config::Problem> problems;
      for (const config::Problem& p : at_module(e, module.path).problems())
        problems.push_back(
            {p.path, "module " + module.name + " (pp " + std::to_string(module.stages) + "): " + p.message});
      throw config::ConfigError(std::move(problems));
    }
  }();
  if (layout.virtual_stages > 1)
    throw config::ConfigError("distributed.pipeline.virtual_stages",
                              module.name + " would run " + std::to_string(layout.virtual_stages) +
                                  " chunks per pipeline stage, but a MIMO module runs one (set 1)");
  options.placement = layout.placement_of(static_cast<uint32_t>(module.stage));
  options.pipeline_group = module.pp;
  options.model_chunks = static_cast<uint32_t>(layout.chunks.size());
  return options;
}

// What a module's model must be to join the others: an encoder's head hands its output on, the
// language model's produces the loss; an encoder's outputs cross the bridge whole.
void MimoTrainer::Impl::check_module_model(const MimoModule& module, const Model& model) const {
  if (module.encoder == model.produces_loss())
    throw config::ConfigError(module.encoder ? module.path + ".model.head.component" : "model.head.component",
                              module.encoder
                                  ? "an encoder's head must hand its output on (an input projection "
                                    "such as vision.projection), not produce a loss"
                                  : "the language model's head must produce the loss");
  // An encoder's stream cut over tp (and the sums of its norms' partial gradients that would
  // need) is not built.
  if (module.encoder && model.sequence_parallel())
    throw config::ConfigError(module.path + ".model.sequence_parallel",
                              "sequence parallelism is not built for a MIMO encoder (its outputs go over "
                              "the bridge whole): set it false");
}

// What module m's update sums its norm over; pipelined, the stages' parameters (stages[m]) and
// the stages holding a tied parameter (tied_groups[m]) too (collective over the module's pp).
UpdateRanks MimoTrainer::Impl::module_update_ranks(std::size_t m, const Model& model) {
  const MimoModule& module = modules[m];
  UpdateRanks ranks;
  ranks.dp = module.dp;
  ranks.dp_rank = module.dp_rank;
  ranks.runtime = runtime;
  ranks.sum_over_tp = sum_over(module.tp);
  ranks.sum_over_expert_tp = sum_over(expert_tensor_group());
  ranks.sum_over_ep = sum_over(module.ep);  // the experts divided over it
  if (const distributed::Communicator* pp = module.pp; pp != nullptr) {
    // Each stage holds part of the module: the norm adds them, a tied copy counts on its owner,
    // and the stages holding a tied parameter sum its gradient.
    stages[m] = gather_pipeline_stages(*pp, model.parameters(), model.parameter_chunks());
    add_pipeline_stages(ranks, *pp, stages[m]);
    tied_groups[m] = pp->split(stages[m].holds_shared() ? 0 : -1, pp->rank(), module.name + " embedding");
  }
  return ranks;
}

// Module m on this rank: its model (built while its groups are in scope: "tp" is "<module>/tp"),
// its parameter update (a data-parallel strategy's over its lanes, or AdamW over the whole store
// for one lane), its initial values.
void MimoTrainer::Impl::build_module(std::size_t m) {
  const MimoModule& module = modules[m];
  if (module.encoder) patch_sizes.push_back(patch_size_of(module));
  stages.emplace_back();
  tied_groups.emplace_back();
  if (!module.here) {
    models.emplace_back();
    updates.emplace_back();
    return;
  }
  const distributed::ModuleGroupScope scope(module.name);
  Model& model = *models.emplace_back(std::make_unique<Model>(*host, module.run_config, module_options(m)));
  check_module_model(module, model);
  const UpdateRanks ranks = module_update_ranks(m, model);
  const OptimizerSettings optimizer = OptimizerSettings::from_run_config(run_config);
  updates.push_back(module.dp != nullptr
                        ? make_sharded_update(*host, module.run_config, model, *runtime, optimizer, ranks)
                        : make_whole_update(model, optimizer, ranks));
  model.initialize(seed);
}

MimoTrainer::MimoTrainer(const PluginHost& host, boost::json::value run_config,
                         const distributed::Runtime* runtime)
    : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.host = &host;
  t.run_config = std::move(run_config);
  t.runtime = runtime;
  t.read_settings();
  t.modules = mimo_modules(t.run_config, runtime);
  const boost::json::value& path = t.run_config.at("data").at("path");
  if (!path.is_string() || path.as_string().empty())
    throw config::ConfigError("data.path",
                              "a MIMO model trains on a multimodal dataset: give its PREFIX "
                              "(plexus data digits --output-prefix PREFIX makes one)");
  t.data = std::make_unique<MimoData>(std::string(path.as_string()), t.seed);
  const data::MultimodalManifest& manifest = t.data->manifest();
  // A multimodal dataset holds one modality: one encoder reads it.
  if (t.encoders() != 1)
    throw config::ConfigError("mimo.modules", std::to_string(t.encoders()) + " encoders, but " +
                                                  std::string(path.as_string()) + " holds one modality (" +
                                                  manifest.modality + "): give one encoder");
  if (t.modules[0].special_token != manifest.special_token)
    throw config::ConfigError(t.modules[0].path + ".special_token_id",
                              std::to_string(t.modules[0].special_token) + ", but " +
                                  std::string(path.as_string()) + " puts the image's embeddings at token " +
                                  std::to_string(manifest.special_token));
  t.rows = t.micro_batch_size * t.language().dp_size;
  for (std::size_t m = 0; m < t.modules.size(); ++m) t.build_module(m);
  const int64_t hidden = t.run_config.at("model").at("hidden_size").to_number<int64_t>();
  for (std::size_t e = 0; e < t.encoders(); ++e)
    t.bridges.push_back(std::make_unique<MimoBridge>(t.modules[e], t.language(), runtime, t.rows,
                                                     manifest.tokens_per_image, hidden,
                                                     static_cast<int32_t>(100 + 2 * e)));
  if (t.trace_end > t.trace_first) t.start_trace();
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

TrainResult MimoTrainer::run(const TrainerEvents& events) {
  Impl& t = *impl_;
  TrainResult result;
  t.open_metrics();
  t.report_start(events);
  detail::Progress progress(t.first_step, t.steps, t.log_interval);
  const auto due = [](int64_t done, int64_t interval) { return interval > 0 && done % interval == 0; };
  for (int64_t step = t.first_step; step < t.steps; ++step) {
    t.trace_before_step(step);
    const auto began = std::chrono::steady_clock::now();
    const double loss = t.train_step(step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    t.trace_after_step(step, events);
    result.losses.push_back(loss);
    result.steps_done = step + 1;
    t.report_step(step, loss, seconds, progress, events);
    const int64_t done = step + 1;
    const bool last = done == t.steps, exit = !last && due(done, t.exit_interval);
    if (last || due(done, t.eval_interval)) t.report_eval(done, last, progress, result, events);
    const bool saved = last || exit || due(done, t.checkpoint_interval);
    if (saved) t.save(done, progress, result, events);
    if (exit) {  // Megatron's --exit-interval: continue with --resume latest
      result.exited_at = done;
      t.write_metrics({{"event", "exit"}, {"step", done}}, events);
      break;
    }
    if (const std::optional<Interruption> stop = last ? std::nullopt : t.agreed_stop(events, done)) {
      t.stop_run(*stop, saved, progress, result, events);
      break;
    }
  }
  if (t.writer) progress.finish();
  return result;
}

}  // namespace plexus

// The training loop of plexus-train: steps of microbatches through the scheduler, the parameter
// update, evaluation, samples, metrics (JSON lines), progress and checkpoints. Reporting is in
// trainer_report.cpp, checkpoints in trainer_checkpoint.cpp, stopping on a signal in
// trainer_stop.cpp; this file is the loop and one step.
#include <omp.h>
#include <boost/json.hpp>

#include <chrono>

#include "engine/context_parallel.hpp"
#include "engine/mtp_inputs.hpp"
#include "engine/sharded_parameters.hpp"
#include "engine/trainer_impl.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/engine/pipeline_layout.hpp"
#include "plexus/core/logging.hpp"

namespace plexus {
namespace {

int64_t get_int(const boost::json::value& root, const char* section, const char* key) {
  return root.at(section).at(key).to_number<int64_t>();
}

// What the trainer checks of the groups before it builds anything. (Tensor parallelism is the
// layers' own: each refuses a tp or expert_tp group it cannot split over, by name.)
// - One model over one grid (require_one_model_grid).
// - Context parallelism cuts each sequence into 2 cp equal chunks (context_parallel.hpp).
void require_supported_parallelism(const distributed::Runtime& runtime, int64_t seq_length) {
  require_one_model_grid(runtime);
  const distributed::Communicator* cp = runtime.group("cp");
  if (cp != nullptr && cp->size() > 1 && seq_length % (2 * cp->size()) != 0)
    throw config::ConfigError("model.seq_length",
                              std::to_string(seq_length) +
                                  " tokens cannot be cut into 2 x cp = " + std::to_string(2 * cp->size()) +
                                  " equal chunks (context parallelism's load-balanced layout): make it a "
                                  "multiple of " +
                                  std::to_string(2 * cp->size()));
}

// Every group of more than one rank, by kind, with what it has carried so far.
std::vector<std::pair<std::string, distributed::Traffic>> traffic_now(const distributed::Runtime* runtime) {
  std::vector<std::pair<std::string, distributed::Traffic>> out;
  if (runtime == nullptr) return out;
  for (const std::string& kind : runtime->group_kinds())
    if (const distributed::Communicator* group = runtime->group(kind); group != nullptr && group->size() > 1)
      out.emplace_back(kind, group->traffic());
  return out;
}

// What each group carried since `before`: its kinds of collective with calls, as JSON.
boost::json::object traffic_since(const std::vector<std::pair<std::string, distributed::Traffic>>& before,
                                  const distributed::Runtime* runtime) {
  boost::json::object out;
  const auto now = traffic_now(runtime);
  for (std::size_t g = 0; g < now.size() && g < before.size(); ++g) {
    boost::json::object kinds;
    for (std::size_t k = 0; k < distributed::kCollectiveKinds; ++k) {
      const uint64_t calls = now[g].second.calls[k] - before[g].second.calls[k];
      if (calls == 0) continue;
      kinds[distributed::collective_name(static_cast<distributed::Collective>(k))] = {
          {"calls", calls}, {"bytes", now[g].second.bytes[k] - before[g].second.bytes[k]}};
    }
    if (!kinds.empty()) out[now[g].first] = std::move(kinds);
  }
  return out;
}

}  // namespace

void require_one_model_grid(const distributed::Runtime& runtime) {
  // Without this check the trainer would find no "dp" among a module layout's kinds and take the
  // whole world for data-parallel replicas of one model.
  for (const std::string& kind : runtime.group_kinds())
    if (const auto slash = kind.find('/'); slash != std::string::npos)
      throw config::ConfigError(
          "distributed.topology",
          "the topology lays out modules on grids of their own (kinds such as '" + kind +
              "'), which train a MIMO model: list its encoders in mimo.modules (docs/mimo.md); a model "
              "without them trains over one grid (the \"grid\" provider)");
}

Trainer::Trainer(const PluginHost& host, boost::json::value run_config, std::unique_ptr<DataSource> data,
                 const distributed::Runtime* runtime)
    : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.host = &host;
  t.plugin_metrics = std::make_unique<PluginMetrics>(host.services());
  t.run_config = std::move(run_config);
  t.data = std::move(data);
  const auto& rc = t.run_config;
  t.steps = get_int(rc, "train", "steps");
  t.microbatches = get_int(rc, "train", "microbatches");
  t.micro_batch_size = get_int(rc, "train", "micro_batch_size");
  t.eval_interval = get_int(rc, "train", "eval_interval");
  t.eval_iters = get_int(rc, "train", "eval_iters");
  t.log_interval = get_int(rc, "train", "log_interval");
  t.exit_interval = get_int(rc, "train", "exit_interval");
  t.tensorboard_dir = std::string(rc.at("train").at("tensorboard_dir").as_string());
  t.peak_tflops = rc.at("train").at("peak_tflops").to_number<double>();
  t.checkpoint_interval = get_int(rc, "checkpoint", "interval");
  t.keep_last = get_int(rc, "checkpoint", "keep_last");
  const std::string names(rc.at("checkpoint").at("names").as_string());
  const auto style = checkpoint::parse_name_style(names);
  if (!style)
    throw config::ConfigError("checkpoint.names", "expected \"local\" or \"te\", got \"" + names + "\"");
  t.checkpoint_names = *style;
  t.sample_tokens = get_int(rc, "sample", "tokens");
  t.sample_temperature = rc.at("sample").at("temperature").to_number<double>();
  t.sample_prompt = std::string(rc.at("sample").at("prompt").as_string());
  t.seed = static_cast<uint64_t>(get_int(rc, "run", "seed"));
  t.output_dir = std::string(rc.at("run").at("output_dir").as_string());

  t.runtime = runtime;
  if (runtime != nullptr) {
    require_supported_parallelism(*runtime, get_int(rc, "model", "seq_length"));
    t.writer = runtime->rank() == 0;
    const distributed::Communicator& dp = runtime->data_parallel();
    t.dp_rank = dp.rank();
    t.dp_size = dp.size();
    if (t.dp_size > 1) t.dp = &dp;
    if (const distributed::Communicator* readers = runtime->group("dp"); readers != nullptr) {
      t.data_rank = readers->rank();
      t.data_size = readers->size();
    } else {
      t.data_rank = t.dp_rank;
      t.data_size = t.dp_size;
    }
    if (const distributed::Communicator* cp = runtime->group("cp"); cp != nullptr && cp->size() > 1) {
      t.cp = cp;
      t.cp_rank = cp->rank();
      t.cp_size = cp->size();
    }
    if (const distributed::Communicator* pp = runtime->group("pp"); pp != nullptr && pp->size() > 1)
      t.pp = pp;
  }
  // More than one data-parallel rank: a strategy will hold the parameters, so the model is built
  // without allocating them and initialized once they are sharded. More than one pipeline stage:
  // this rank builds its chunks only.
  ModelOptions options;
  options.deferred_parameters = t.dp != nullptr;
  if (runtime != nullptr) {
    if (const distributed::Communicator* tp = runtime->group("tp"); tp != nullptr && tp->size() > 1)
      options.tensor_group = tp;
    if (const distributed::Communicator* etp = runtime->group("expert_tp"); etp != nullptr && etp->size() > 1)
      options.expert_tensor_group = etp;
  }
  options.context_parallel = t.cp != nullptr;
  if (t.pp != nullptr) {
    t.layout = pipeline_layout(plan_decoder(host, rc), PipelineSettings::from_run_config(rc), t.pp->size());
    options.placement = t.layout.placement_of(static_cast<uint32_t>(t.pp->rank()));
    options.pipeline_group = t.pp;
    options.model_chunks = static_cast<uint32_t>(t.layout.chunks.size());
  }
  t.model = std::make_unique<Model>(host, rc, options);
  if (const auto* sp = rc.at("model").as_object().if_contains("sequence_parallel");
      sp != nullptr && sp->is_bool() && sp->as_bool() && !t.model->sequence_parallel() && t.writer)
    log_warn("trainer", "model.sequence_parallel has no effect without tensor parallelism (tp = 1)");
  t.seq_length = t.model->settings().seq_length;
  t.scheduler_config = std::make_unique<ConfigHandle>(rc.at("scheduler").at("options"), "scheduler.options");
  t.scheduler = std::make_unique<SchedulerInstance>(
      host.get(PLX_KIND_SCHEDULER, std::string(rc.at("scheduler").at("component").as_string())),
      t.scheduler_config->get());
  UpdateRanks ranks;
  ranks.dp = t.dp;
  ranks.dp_rank = t.dp_rank;
  // The experts of a layer are divided over the ep group.
  ranks.sum_over_ep = sum_over(runtime != nullptr ? runtime->group("ep") : nullptr);
  ranks.runtime = runtime;
  ranks.sum_over_tp = sum_over(options.tensor_group);
  ranks.sum_over_expert_tp = sum_over(options.expert_tensor_group);
  if (t.pp != nullptr) {
    // Each stage holds part of the model: the norm adds them, a tied copy counts on its owner, and
    // the stages holding a tied parameter sum its gradient (the embedding group).
    t.stages = gather_pipeline_stages(*t.pp, t.model->parameters(), t.model->parameter_chunks());
    add_pipeline_stages(ranks, *t.pp, t.stages);
    t.tied_group = t.pp->split(t.stages.holds_shared() ? 0 : -1, t.pp->rank(), "embedding");
    // Collective: whether world rank 0, which writes checkpoints, is in this pp group.
    const bool writer_in_group = t.over_pipeline(runtime->rank() == 0 ? 1.0 : 0.0) > 0;
    t.sends_to_writer = writer_in_group && t.pp->rank() > 0;
  }
  const OptimizerSettings optimizer = OptimizerSettings::from_run_config(rc);
  t.update = t.dp != nullptr ? make_sharded_update(host, rc, *t.model, *runtime, optimizer, ranks)
                             : make_whole_update(*t.model, optimizer, ranks);
  t.collective_forward = static_cast<bool>(ranks.sum_over_ep) || t.pp != nullptr ||
                         options.tensor_group != nullptr || options.expert_tensor_group != nullptr ||
                         (t.model->sharded() != nullptr && t.model->sharded()->values_sharded());
  t.model->initialize(t.seed);
  // The engine's loops and the CPU layers share one OpenMP team, driven from this thread.
  if (rc.at("run").at("adapt_threads").as_bool() && t.model->device().device_type == kDLCPU)
    t.threads = ThreadGovernor::start(omp_get_max_threads());
  if (rc.at("train").at("profile").as_bool()) {
    t.profile = std::make_unique<StepProfile>(t.model->device());
    t.model->set_profile(t.profile.get());
  }
  if (const int64_t traced = get_int(rc.at("train"), "trace", "steps"); traced > 0) {
    t.trace_first = get_int(rc.at("train"), "trace", "first_step") - 1;
    t.trace_end = t.trace_first + traced;
    t.timeline = std::make_unique<Timeline>(t.model->device());
    t.model->set_timeline(t.timeline.get());
  }
  // Under context parallelism the model runs on this rank's seq_length / cp tokens of each sequence.
  const int64_t local_seq = t.seq_length / t.cp_size;
  for (int64_t i = 0; i < t.microbatches; ++i)
    t.batches.push_back(Batch{Tensor({t.micro_batch_size, local_seq}, plx_dtype_i32()),
                              Tensor({t.micro_batch_size, local_seq}, plx_dtype_i32())});
  if (t.cp != nullptr) {
    const auto whole = [&] {
      return Batch{Tensor({t.micro_batch_size, t.seq_length}, plx_dtype_i32()),
                   Tensor({t.micro_batch_size, t.seq_length}, plx_dtype_i32())};
    };
    t.whole_batch = whole();
    // MTP depth d reads tokens d places on, across this rank's chunks: rolled whole, then cut.
    if (const uint32_t depths = t.model->plan().mtp_depths; depths > 0) {
      t.whole_rolled = whole();
      for (Batch& batch : t.batches)
        for (uint32_t d = 0; d < depths; ++d) {
          batch.mtp_tokens.emplace_back(std::vector<int64_t>{t.micro_batch_size, local_seq}, plx_dtype_i32());
          batch.mtp_targets.emplace_back(std::vector<int64_t>{t.micro_batch_size, local_seq},
                                         plx_dtype_i32());
        }
    }
    if (t.sample_tokens > 0 && t.writer)
      log_info("trainer", "no text samples under context parallelism (sample.tokens is ignored)");
    t.sample_tokens = 0;
  }
}

Trainer::~Trainer() = default;
Model& Trainer::model() noexcept {
  return *impl_->model;
}

void Trainer::resume_from(const std::filesystem::path& checkpoint) {
  impl_->load_checkpoint(checkpoint);
}

double Trainer::Impl::over_ranks(double value, distributed::ReduceOp op) const {
  return dp == nullptr ? value : dp->all_reduce(value, op);
}

double Trainer::Impl::over_pipeline(double value) const {
  return pp == nullptr ? value : pp->all_reduce(value, distributed::ReduceOp::sum);
}

double Trainer::Impl::over_job(double value, distributed::ReduceOp op) const {
  if (runtime == nullptr || runtime->world_size() == 1) return value;
  return runtime->world().all_reduce(value, op);
}

void Trainer::Impl::barrier() const {
  if (runtime != nullptr && runtime->world_size() > 1) runtime->world().barrier();
}

std::vector<double> Trainer::Impl::loss_over_job(std::vector<double> values) const {
  if (values.empty()) return values;
  const Tensor summed = Tensor::borrowed(values.data(), {static_cast<int64_t>(values.size())},
                                         plx_dtype_f64(), DLDevice{kDLCPU, 0});
  if (pp != nullptr) pp->all_reduce(summed.view(), distributed::ReduceOp::sum);
  if (dp != nullptr) dp->all_reduce(summed.view(), distributed::ReduceOp::avg);
  return values;
}

void Trainer::Impl::read_batch(uint64_t at, Batch& batch, bool validation) {
  Batch& target = cp != nullptr ? whole_batch : batch;
  if (validation)
    data->validation_batch(at, target);
  else
    data->train_batch(at, target);
  if (cp == nullptr) return;
  take_context_parallel_chunks(whole_batch.tokens, batch.tokens, cp_rank, cp_size);
  take_context_parallel_chunks(whole_batch.targets, batch.targets, cp_rank, cp_size);
  for (std::size_t d = 0; d < batch.mtp_tokens.size(); ++d) {
    roll_for_mtp_depth(whole_batch.tokens, whole_batch.targets, static_cast<uint32_t>(d + 1),
                       whole_rolled.tokens, whole_rolled.targets);
    take_context_parallel_chunks(whole_rolled.tokens, batch.mtp_tokens[d], cp_rank, cp_size);
    take_context_parallel_chunks(whole_rolled.targets, batch.mtp_targets[d], cp_rank, cp_size);
  }
}

Trainer::Impl::StepResult Trainer::Impl::train_step(int64_t step) {
  using Phase = StepProfile::Phase;
  if (threads) threads->before_step();
  const auto begin = std::chrono::steady_clock::now();
  const auto traffic_before = traffic_now(runtime);
  update->begin_step(microbatches);
  // The step's global batch is data_size x microbatches microbatches; this rank takes its
  // contiguous share, so N ranks see exactly the tokens one rank with N times the microbatches
  // would (the cp ranks of a data-parallel rank read the same microbatches and keep their chunks).
  for (int64_t i = 0; i < microbatches; ++i) {
    const int64_t global_microbatch = (step * data_size + data_rank) * microbatches + i;
    read_batch(static_cast<uint64_t>(global_microbatch * micro_batch_size),
               batches[static_cast<std::size_t>(i)], false);
  }
  StepResult result;
  result.loss = model->forward_backward(*scheduler, batches);
  {
    const Timeline::Scope span(timeline.get(), "gradient reduction (wait)", "comm");
    update->finish_gradients(profile.get());
  }
  if (model->sequence_parallel()) {  // after the data-parallel reduction, as Megatron
    const Timeline::Scope span(timeline.get(), "sequence-parallel gradient all-reduce", "comm");
    update->sum_partial_gradients(*model->tensor_group());
  }
  if (tied_group != nullptr) {  // after the data-parallel reduction, as Megatron
    const Timeline::Scope span(timeline.get(), "tied embedding all-reduce", "comm");
    for (std::size_t p = 0; p < stages.shared.size(); ++p)
      if (stages.shared[p]) update->all_reduce_gradient(p, *tied_group);
  }
  // The loss is the last stage's; the stages' sum is it on every stage.
  result.loss = over_ranks(over_pipeline(result.loss), distributed::ReduceOp::avg);
  result.mtp_losses = loss_over_job(model->mtp_losses());
  {
    const StepProfile::Scope timed(profile.get(), "gradient finiteness check", Phase::update);
    update->check_gradients_finite();
  }
  {
    const StepProfile::Scope timed(profile.get(), "optimizer (clip, AdamW)", Phase::update);
    const Timeline::Scope span(timeline.get(), "optimizer (clip, AdamW)", "update");
    result.grad_norm = update->apply(step);
  }
  if (model->has_after_step()) {
    // Layers update their buffers (an MoE router's expert bias) from the step's forwards.
    const StepProfile::Scope timed(profile.get(), "layers after the step", Phase::update);
    model->after_step(step);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  result.comm = traffic_since(traffic_before, runtime);
  if (threads) {
    result.cpu_threads = threads->threads();
    const std::optional<std::string> change = threads->after_step(result.seconds);
    result.cpu_waited_cores = threads->waited_cores();
    if (change) log_info("trainer", *change);
  }
  return result;
}

TrainResult Trainer::run(const TrainerEvents& events) {
  Impl& t = *impl_;
  TrainResult result;
  t.open_metrics();
  t.report_start(events);
  detail::Progress progress(t.start_step, t.steps, t.log_interval);
  int64_t saved_step = -1;  // the step of the checkpoint this run wrote last
  const auto stopped_after = [&](int64_t done) {
    const std::optional<Interruption> stop = t.agreed_stop(events, done);
    if (stop) t.stop_run(*stop, saved_step, progress, result, events);
    return stop.has_value();
  };
  const bool stopped_first = t.start_step < t.steps && stopped_after(t.start_step);
  for (int64_t step = t.start_step; step < t.steps && !stopped_first; ++step) {
    t.trace_before_step(step);
    const Impl::StepResult trained = t.train_step(step);
    t.trace_after_step(step, events);
    t.report_step(step, trained, progress, events);
    result.losses.push_back(trained.loss);
    const int64_t done = result.steps_done = step + 1;
    // The last step needs no stop: the final evaluation and checkpoint follow at once.
    if (done == t.steps || stopped_after(done)) break;
    const bool evaluate = t.eval_interval > 0 && done % t.eval_interval == 0;
    const bool save = t.checkpoint_interval > 0 && done % t.checkpoint_interval == 0;
    if (evaluate) t.report_eval(done, progress, result, events);
    if (save) {
      result.last_checkpoint = t.save_checkpoint(done);
      saved_step = done;
    }
    // An evaluation or a checkpoint takes a while: a signal may have arrived meanwhile.
    if ((evaluate || save) && stopped_after(done)) break;
    if (t.exit_interval > 0 && done % t.exit_interval == 0) {
      t.exit_run(done, saved_step, progress, result, events);
      break;
    }
  }
  t.report_end(progress, result);
  if (!result.interrupted && !result.exited_at && t.start_step < t.steps) {
    t.report_eval(t.steps, progress, result, events);
    result.last_checkpoint = t.save_checkpoint(t.steps);
    if (t.writer) progress.line("checkpoint: " + result.last_checkpoint.string());
  }
  return result;
}

}  // namespace plexus

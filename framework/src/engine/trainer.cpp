#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include <sys/resource.h>

#include "engine/device_ops.hpp"

#include "engine/progress.hpp"
#include "engine/trainer_impl.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/random.hpp"
#include "plexus/core/json_text.hpp"
#include "plexus/core/logging.hpp"

namespace plexus {
namespace {

// The most memory this process has had resident (Linux reports it in KiB).
int64_t peak_resident_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

int64_t get_int(const boost::json::value& root, const char* section, const char* key) {
  return root.at(section).at(key).to_number<int64_t>();
}

// The trainer's layers are not model-parallel: every group but dp and ep must be a single rank.
// The ep ranks are data-parallel ranks of the dense part (each trains its own share of the
// batch); only the MoE layers' experts are divided over them.
void require_data_and_expert_parallel_only(const distributed::Runtime& runtime) {
  for (const char* kind : {"tp", "cp", "pp", "expert_tp"}) {
    const distributed::Communicator* group = runtime.group(kind);
    if (group != nullptr && group->size() > 1)
      throw config::ConfigError("distributed.topology.options",
                                "the " + std::string(kind) + " groups have " + std::to_string(group->size()) +
                                    " ranks, but the trainer's layers are not " + kind +
                                    "-parallel: it runs data parallelism and expert parallelism only "
                                    "(set tp, cp, pp and expert_tp to 1)");
  }
}

// run.precision's value, for the log and the start record.
const char* precision_name(const Model& model) {
  return plx_dtype_equal(model.settings().activation_dtype, plx_dtype_bf16()) ? "bf16" : "fp32";
}

}  // namespace

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

  // More than one data-parallel rank: a strategy will hold the parameters, so the model is built
  // without allocating them and initialized once they are sharded.
  const bool sharded = runtime != nullptr && runtime->data_parallel().size() > 1;
  t.model = std::make_unique<Model>(host, rc, sharded);
  t.seq_length = t.model->settings().seq_length;
  t.scheduler_config = std::make_unique<ConfigHandle>(rc.at("scheduler").at("options"), "scheduler.options");
  t.scheduler = std::make_unique<SchedulerInstance>(
      host.get(PLX_KIND_SCHEDULER, std::string(rc.at("scheduler").at("component").as_string())),
      t.scheduler_config->get());
  t.runtime = runtime;
  std::function<double(double)> sum_over_ep = [](double local) { return local; };
  if (runtime != nullptr) {
    require_data_and_expert_parallel_only(*runtime);
    t.writer = runtime->rank() == 0;
    const distributed::Communicator& dp = runtime->data_parallel();
    t.dp_rank = dp.rank();
    t.dp_size = dp.size();
    if (t.dp_size > 1) t.dp = &dp;
    // The experts of an ep group are divided over its ranks: the gradient norm sums theirs over it.
    if (const distributed::Communicator* ep = runtime->group("ep"); ep != nullptr && ep->size() > 1) {
      t.collective_forward = true;
      sum_over_ep = [ep](double local) {
        Tensor scalar({1}, plx_dtype_f64());
        *scalar.data<double>() = local;
        ep->all_reduce(scalar.view(), distributed::ReduceOp::sum);
        return *scalar.data<double>();
      };
    }
  }
  const OptimizerSettings optimizer_settings = OptimizerSettings::from_run_config(rc);
  if (t.dp != nullptr) {
    // More than one data-parallel rank: the strategy the config names holds the parameters.
    const auto& section = rc.at("distributed").at("data_parallel");
    t.strategy_config = std::make_unique<ConfigHandle>(section.at("options"), "distributed.data_parallel.options");
    t.model->shard_parameters(host.get(PLX_KIND_DATA_PARALLEL, std::string(section.at("component").as_string())),
                              t.strategy_config->get(), section.at("layers_per_unit").to_number<int64_t>(),
                              *runtime);
    t.sharded_optimizer = std::make_unique<ShardedAdamW>(
        *t.model->sharded(), t.model->parameters(), optimizer_settings,
        [&t](double local) { return t.over_ranks(local, distributed::ReduceOp::sum); }, sum_over_ep);
    t.collective_forward = t.collective_forward || t.model->sharded()->values_sharded();
    t.model->initialize(t.seed);
  } else {
    t.model->initialize(t.seed);
    t.optimizer = std::make_unique<AdamW>(t.model->parameters(), optimizer_settings);
    if (t.collective_forward) t.optimizer->set_divided_sum(sum_over_ep);
  }
  if (rc.at("train").at("profile").as_bool()) {
    t.profile = std::make_unique<StepProfile>(t.model->device());
    t.model->set_profile(t.profile.get());
  }
  for (int64_t i = 0; i < t.microbatches; ++i)
    t.batches.push_back(Batch{Tensor({t.micro_batch_size, t.seq_length}, plx_dtype_i32()),
                              Tensor({t.micro_batch_size, t.seq_length}, plx_dtype_i32())});
}

Trainer::~Trainer() = default;
Model& Trainer::model() noexcept {
  return *impl_->model;
}

void Trainer::resume_from(const std::filesystem::path& checkpoint) {
  impl_->load_checkpoint(checkpoint);
}

double Trainer::Impl::over_ranks(double value, distributed::ReduceOp op) const {
  if (dp == nullptr) return value;
  Tensor scalar({1}, plx_dtype_f64());
  *scalar.data<double>() = value;
  dp->all_reduce(scalar.view(), op);
  return *scalar.data<double>();
}

void Trainer::Impl::check_sharded_gradients_finite() const {
  const ShardedParameters& sharded = *model->sharded();
  std::string found;
  const auto& buffers = sharded.buffers();
  for (std::size_t k = 0; k < buffers.size() && found.empty(); ++k) {
    const DataParallelInstance::Shard shard = model->sharded()->strategy().shard(static_cast<uint32_t>(k));
    for (const ShardedParameters::Segment& s : buffers[k].segments) {
      auto* first = static_cast<std::byte*>(shard.grads.data) + shard.grads.byte_offset +
                    static_cast<std::size_t>(s.shard_begin) * sizeof(float);
      const Tensor part = Tensor::borrowed(first, {s.count}, plx_dtype_f32(), shard.grads.device);
      if (const int64_t bad = device_ops::first_non_finite(part); bad >= 0) {
        found = "non-finite gradient of " + model->parameters()[s.param].name + " (element " +
                std::to_string(s.param_begin + bad) + ") in unit " + buffers[k].name;
        break;
      }
    }
  }
  // Each rank sees only its shards: every rank learns whether any found one, so all stop together.
  const double any = over_ranks(found.empty() ? 0.0 : 1.0, distributed::ReduceOp::max);
  if (!found.empty()) throw NonFiniteError(found + ", on data-parallel rank " + std::to_string(dp_rank));
  if (any > 0)
    throw NonFiniteError("non-finite gradient in a shard of another data-parallel rank (its message names the "
                         "parameter)");
}

boost::json::array Trainer::Impl::memory_per_rank() const {
  // Parameters, gradients, optimizer state, the strategy's peaks, and the peak resident memory.
  constexpr int64_t kFields = 7;
  Tensor mine({kFields}, plx_dtype_f64());
  double* m = mine.data<double>();
  if (const ShardedParameters* sharded = model->sharded()) {
    const plx_dp_memory held = sharded->memory();
    m[0] = static_cast<double>(held.param_bytes);
    m[1] = static_cast<double>(held.grad_bytes);
    m[2] = static_cast<double>(sharded_optimizer->state_bytes());
    m[3] = static_cast<double>(held.peak_param_bytes);
    m[4] = static_cast<double>(held.peak_grad_bytes);
    m[6] = static_cast<double>(held.peak_bytes);
  } else {
    const ParameterStore& params = model->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      m[0] += static_cast<double>(params[i].value.bytes());
      m[1] += static_cast<double>(params[i].grad.bytes());
    }
    m[2] = 2 * m[0];  // AdamW's two moments
    m[3] = m[0];
    m[4] = m[1];
    m[6] = m[0] + m[1];
  }
  m[5] = static_cast<double>(peak_resident_bytes());
  Tensor all({kFields * dp_size}, plx_dtype_f64());
  if (dp != nullptr)
    dp->all_gather(mine.view(), all.view());
  else
    all.copy_from(mine);
  boost::json::array out;
  for (int64_t r = 0; r < dp_size; ++r) {
    const double* v = all.data<double>() + r * kFields;
    out.push_back(boost::json::object{{"rank", r},
                                      {"parameter_bytes", static_cast<int64_t>(v[0])},
                                      {"gradient_bytes", static_cast<int64_t>(v[1])},
                                      {"optimizer_bytes", static_cast<int64_t>(v[2])},
                                      {"peak_parameter_bytes", static_cast<int64_t>(v[3])},
                                      {"peak_gradient_bytes", static_cast<int64_t>(v[4])},
                                      {"peak_parameter_and_gradient_bytes", static_cast<int64_t>(v[6])},
                                      {"peak_resident_bytes", static_cast<int64_t>(v[5])}});
  }
  return out;
}

void Trainer::Impl::barrier() const {
  if (runtime != nullptr && runtime->world_size() > 1) runtime->world().barrier();
}

void Trainer::Impl::write_metrics(const boost::json::object& record, const TrainerEvents& events) {
  if (!writer) return;
  metrics << json_text(record) << '\n';
  metrics.flush();  // a crashed run keeps every record written so far
  if (events.on_metrics) events.on_metrics(record);
}

double Trainer::Impl::evaluate() {
  Batch batch{Tensor({micro_batch_size, seq_length}, plx_dtype_i32()),
              Tensor({micro_batch_size, seq_length}, plx_dtype_i32())};
  // The validation batches are shared out over the data-parallel ranks and the sum gathered,
  // so the loss is that of all eval_iters batches whatever the number of ranks.
  // With divided experts every rank runs the same number of rounds (a rank past the last batch
  // evaluates one again, for the others' all-to-alls, and does not count it).
  const int64_t rounds = collective_forward ? (eval_iters + dp_size - 1) / dp_size : 0;
  double sum = 0;
  for (int64_t round = 0, i = dp_rank; i < eval_iters || round < rounds; i += dp_size, ++round) {
    data->validation_batch(static_cast<uint64_t>(i % eval_iters), batch);
    const double loss = model->evaluate(batch);
    if (i < eval_iters) sum += loss;
  }
  return over_ranks(sum, distributed::ReduceOp::sum) / static_cast<double>(eval_iters);
}

std::string Trainer::Impl::sample(int64_t step) {
  std::vector<int32_t> tokens = data->encode(sample_prompt);
  if (tokens.empty()) tokens.push_back(0);
  const std::size_t prompt_length = tokens.size();
  const CounterRng rng(seed, stable_hash("sample") + static_cast<uint64_t>(step));
  Batch batch{Tensor({1, seq_length}, plx_dtype_i32()), Tensor({1, seq_length}, plx_dtype_i32())};
  for (int64_t n = 0; n < sample_tokens; ++n) {
    // The last seq_length tokens are the context; padding after them is never attended to
    // (causal attention), so the logits at the context's last position are exact.
    const std::size_t begin =
        tokens.size() > static_cast<std::size_t>(seq_length) ? tokens.size() - seq_length : 0;
    const auto length = static_cast<int64_t>(tokens.size() - begin);
    int32_t* input = batch.tokens.data<int32_t>();
    for (int64_t i = 0; i < seq_length; ++i) input[i] = i < length ? tokens[begin + i] : 0;
    const std::vector<float> logits = model->next_token_logits(batch, length - 1);
    int32_t next = 0;
    if (sample_temperature <= 0) {
      for (std::size_t v = 1; v < logits.size(); ++v)
        if (logits[v] > logits[static_cast<std::size_t>(next)]) next = static_cast<int32_t>(v);
    } else {
      const float top = *std::max_element(logits.begin(), logits.end());
      std::vector<double> weights(logits.size());
      double total = 0;
      for (std::size_t v = 0; v < logits.size(); ++v)
        total += weights[v] = std::exp((logits[v] - top) / sample_temperature);
      double pick = rng.uniform(static_cast<uint64_t>(n)) * total;
      next = static_cast<int32_t>(logits.size() - 1);
      for (std::size_t v = 0; v < weights.size(); ++v) {
        if ((pick -= weights[v]) < 0) {
          next = static_cast<int32_t>(v);
          break;
        }
      }
    }
    tokens.push_back(next);
  }
  return data->decode(
      std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(prompt_length), tokens.end()));
}

TrainResult Trainer::run(const TrainerEvents& events) {
  Impl& t = *impl_;
  if (t.writer) {
    std::filesystem::create_directories(t.output_dir);
    t.metrics.open(t.output_dir / "metrics.jsonl", std::ios::app);
    if (!t.metrics)
      throw std::runtime_error("cannot write metrics to " + (t.output_dir / "metrics.jsonl").string());
  }
  TrainResult result;
  const int64_t params = t.model->parameters().count_elements();
  const std::optional<double> flops_per_token = t.model->flops_per_token();
  if (t.writer)
    log_info("trainer", "model: " + std::to_string(params) + " parameters, " +
                            std::to_string(t.model->settings().num_layers) + " layers on " +
                            device::name(t.model->device()) + ", " + precision_name(*t.model) +
                            " activations; training steps " + std::to_string(t.start_step + 1) + ".." +
                            std::to_string(t.steps));
  if (t.writer && t.model->sharded())
    log_info("trainer", "data parallel over " + std::to_string(t.dp_size) + " ranks: " +
                            t.model->sharded()->strategy_name() + " over " +
                            std::to_string(t.model->sharded()->num_units()) + " units");
  boost::json::array memory = t.memory_per_rank();
  boost::json::object data_parallel{{"component", nullptr}};
  if (const ShardedParameters* sharded = t.model->sharded()) {
    // The whole values of the largest unit (all its buffers), what one gathered unit costs.
    std::vector<int64_t> unit_bytes(sharded->num_units(), 0);
    for (const ShardedParameters::Buffer& b : sharded->buffers())
      unit_bytes[b.fsdp] += b.numel * static_cast<int64_t>(sizeof(float));
    const int64_t largest = *std::max_element(unit_bytes.begin(), unit_bytes.end());
    data_parallel = {{"component", std::string(t.run_config.at("distributed").at("data_parallel").at("component").as_string())},
                     {"options", t.run_config.at("distributed").at("data_parallel").at("options")},
                     {"units", static_cast<int64_t>(sharded->num_units())},
                     {"buffers", static_cast<int64_t>(sharded->buffers().size())},
                     {"largest_unit_bytes", largest}};
  }
  t.write_metrics({{"event", "start"},
                   {"run", t.run_config.at("run").at("name")},
                   {"parameters", params},
                   {"device", device::name(t.model->device())},
                   {"precision", precision_name(*t.model)},
                   {"first_step", t.start_step + 1},
                   {"steps", t.steps},
                   {"data_parallel_size", t.dp_size},
                   {"data_parallel", data_parallel},
                   {"memory_per_rank", memory}},
                  events);
  const double tokens_per_step =
      static_cast<double>(t.dp_size * t.microbatches * t.micro_batch_size * t.seq_length);
  detail::Progress progress(t.start_step, t.steps, t.log_interval);
  const auto report_eval = [&](int64_t step_done) {
    const double val = t.evaluate();
    result.final_val_loss = val;
    t.write_metrics({{"event", "eval"}, {"step", step_done}, {"val_loss", val}}, events);
    if (!t.writer) {
      // The writer's sample runs the model: with divided experts the other ranks join its forwards.
      if (t.collective_forward && t.sample_tokens > 0) {
        try {
          t.sample(step_done);
        } catch (const std::exception&) {
          // the writer reports it
        }
      }
      return;
    }
    std::string text = "eval at step " + std::to_string(step_done) + ": val_loss " + std::to_string(val);
    if (t.sample_tokens > 0) {
      // A sample is there to be read: if it fails, the run goes on to its checkpoint.
      std::string sample;
      try {
        sample = t.sample(step_done);
      } catch (const std::exception& e) {
        sample = "(no sample: " + std::string(e.what()) + ")";
      }
      text += "\n--- sample ---\n" + sample + "\n--------------";
    }
    progress.line(text);
  };
  int64_t saved_step = -1;  // the step of the checkpoint this run wrote last
  const auto stopped_after = [&](int64_t done) {
    const std::optional<Interruption> stop = t.agreed_stop(events, done);
    if (stop) t.stop_run(*stop, saved_step, progress, result, events);
    return stop.has_value();
  };
  const bool stopped_first = t.start_step < t.steps && stopped_after(t.start_step);
  for (int64_t step = t.start_step; step < t.steps && !stopped_first; ++step) {
    const auto begin = std::chrono::steady_clock::now();
    ShardedParameters* const sharded = t.model->sharded();
    if (sharded != nullptr)
      sharded->begin_step(t.microbatches);
    else
      t.model->parameters().zero_grads();
    // The step's global batch is dp_size x microbatches microbatches; this rank takes its
    // contiguous share, so N ranks see exactly the tokens one rank with N times the
    // microbatches would.
    for (int64_t i = 0; i < t.microbatches; ++i) {
      const int64_t global_microbatch = (step * t.dp_size + t.dp_rank) * t.microbatches + i;
      t.data->train_batch(static_cast<uint64_t>(global_microbatch * t.micro_batch_size),
                          t.batches[static_cast<std::size_t>(i)]);
    }
    using Phase = StepProfile::Phase;
    double loss = t.model->forward_backward(*t.scheduler, t.batches);
    if (sharded != nullptr) {
      const StepProfile::Scope timed(t.profile.get(), "gradient reduction (wait)", Phase::update);
      sharded->finish_grads();
      loss = t.over_ranks(loss, distributed::ReduceOp::avg);
    }
    {
      const StepProfile::Scope timed(t.profile.get(), "gradient finiteness check", Phase::update);
      if (sharded != nullptr)
        t.check_sharded_gradients_finite();
      else
        t.model->check_gradients_finite();
    }
    double grad_norm = 0;
    {
      const StepProfile::Scope timed(t.profile.get(), "optimizer (clip, AdamW)", Phase::update);
      grad_norm = sharded != nullptr ? t.sharded_optimizer->step(step) : t.optimizer->step(step);
    }
    if (t.model->has_after_step()) {
      // Layers update their buffers (an MoE router's expert bias) from the step's forwards.
      const StepProfile::Scope timed(t.profile.get(), "layers after the step", Phase::update);
      t.model->after_step(step);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    const double tokens_per_s = tokens_per_step / seconds;
    const double gflops = flops_per_token ? *flops_per_token * tokens_per_s / 1e9 : -1.0;
    result.losses.push_back(loss);
    boost::json::object record{{"event", "step"},        {"step", step + 1},
                               {"loss", loss},           {"lr", t.last_lr()},
                               {"grad_norm", grad_norm}, {"tokens_per_s", tokens_per_s},
                               {"step_seconds", seconds}};
    if (gflops >= 0) record["gflops_per_s"] = gflops;
    t.plugin_metrics->take_step(record);
    const int64_t done = step + 1;
    if (done % t.log_interval == 0 || done == t.steps) record["memory_per_rank"] = t.memory_per_rank();
    t.write_metrics(record, events);
    if (t.writer) progress.step(step, loss, t.last_lr(), tokens_per_s, gflops);
    if (t.profile) {
      t.profile->end_step(seconds);
      if (done % t.log_interval == 0 || done == t.steps) {
        boost::json::object profile{{"event", "profile"}, {"step", done}};
        for (auto& field : t.profile->take_window()) profile.emplace(field.key(), std::move(field.value()));
        t.write_metrics(profile, events);
      }
    }
    result.steps_done = done;
    // The last step needs no stop: the final evaluation and checkpoint follow at once.
    if (done == t.steps) break;
    if (stopped_after(done)) break;
    bool slow_part = false;  // an evaluation or a checkpoint, during which a signal may arrive
    if (t.eval_interval > 0 && done % t.eval_interval == 0) {
      report_eval(done);
      slow_part = true;
    }
    if (t.checkpoint_interval > 0 && done % t.checkpoint_interval == 0) {
      result.last_checkpoint = t.save_checkpoint(done);
      saved_step = done;
      slow_part = true;
    }
    if (slow_part && stopped_after(done)) break;
  }
  if (t.writer) progress.finish();
  if (t.writer && t.profile && !result.losses.empty())
    progress.line("step profile (per step; on a GPU every part is synchronized, so steps are slower):\n" +
                  t.profile->table());
  if (!result.interrupted && t.start_step < t.steps) {
    report_eval(t.steps);
    result.last_checkpoint = t.save_checkpoint(t.steps);
    if (t.writer) progress.line("checkpoint: " + result.last_checkpoint.string());
  }
  return result;
}

}  // namespace plexus

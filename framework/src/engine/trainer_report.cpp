// What a run tells its user: the metrics stream (JSON lines in <run.output_dir>/metrics.jsonl),
// the progress line, evaluations with a text sample, and the step profile. Only world rank 0
// writes; the collectives (memory per rank, evaluation rounds) run on every rank.
#include <algorithm>
#include <boost/json.hpp>
#include <cmath>

#include <sys/resource.h>

#include "engine/trainer_impl.hpp"
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

// run.precision's value, for the log and the start record.
const char* precision_name(const Model& model) {
  return plx_dtype_equal(model.settings().activation_dtype, plx_dtype_bf16()) ? "bf16" : "fp32";
}

// TensorBoard's text plugin reads Markdown: the sample as a code block (indented lines), so its
// characters are shown as they are.
std::string replace_newlines(const std::string& text, const std::string& with) {
  std::string out;
  for (const char c : text) {
    if (c == '\n')
      out += with;
    else
      out.push_back(c);
  }
  return out;
}

}  // namespace

void Trainer::Impl::open_metrics() {
  if (writer) metrics.open(output_dir, tensorboard_dir);
}

void Trainer::Impl::write_metrics(const boost::json::object& record, const TrainerEvents& events) {
  if (writer) metrics.write(record, events);
}

void Trainer::Impl::report_start(const TrainerEvents& events) {
  // Pipelined, each stage holds part of the model: the whole model's numbers are the stages' sums
  // (a tied copy counted once; its head's products are real work on the last stage).
  const ParameterStore& store = model->parameters();
  int64_t owned = 0;
  for (std::size_t p = 0; p < store.size(); ++p)
    if (pp == nullptr || stages.owned[p]) owned += store[p].whole_numel();
  const auto params = static_cast<int64_t>(over_pipeline(static_cast<double>(owned)));
  flops_per_token = model->flops_per_token();
  if (pp != nullptr) {  // every stage must know whether every stage could tell
    const double unknown = over_pipeline(flops_per_token ? 0.0 : 1.0);
    const double total = over_pipeline(flops_per_token.value_or(0.0));
    flops_per_token = unknown > 0 ? std::nullopt : std::optional<double>(total);
  }
  tokens_per_step = static_cast<double>(data_size * microbatches * micro_batch_size * seq_length);
  if (writer) {
    if (pp != nullptr)
      log_info("trainer", "pipeline: " + std::to_string(pp->size()) + " stages, this one holding " +
                              std::to_string(model->num_chunks()) + " chunk(s) of the model");
    log_info("trainer", "model: " + std::to_string(params) + " parameters, " +
                            std::to_string(model->settings().num_layers) + " layers on " +
                            device::name(model->device()) + ", " + precision_name(*model) +
                            " activations; training steps " + std::to_string(start_step + 1) + ".." +
                            std::to_string(steps));
    if (const std::string line = update->summary_line(); !line.empty()) log_info("trainer", line);
  }
  boost::json::array memory = memory_per_rank();
  boost::json::object record{{"event", "start"},
                             {"run", run_config.at("run").at("name")},
                             {"parameters", params},
                             {"device", device::name(model->device())},
                             {"precision", precision_name(*model)},
                             {"first_step", start_step + 1},
                             {"steps", steps},
                             {"data_parallel_size", data_size},
                             {"context_parallel_size", cp_size},
                             {"data_parallel", update->describe()},
                             {"memory_per_rank", memory}};
  if (pp != nullptr) record["pipeline"] = pipeline_layout_record();
  write_metrics(record, events);
}

void Trainer::Impl::report_step(int64_t step, const StepResult& trained, detail::Progress& progress,
                                const TrainerEvents& events) {
  const double tokens_per_s = tokens_per_step / trained.seconds;
  const double gflops = flops_per_token ? *flops_per_token * tokens_per_s / 1e9 : -1.0;
  boost::json::object record{{"event", "step"},
                             {"step", step + 1},
                             {"loss", trained.loss},
                             {"lr", update->last_lr()},
                             {"grad_norm", trained.grad_norm},
                             {"tokens_per_s", tokens_per_s},
                             {"step_seconds", trained.seconds}};
  if (gflops >= 0) record["gflops_per_s"] = gflops;
  // Model FLOP utilization: the job's model FLOP/s over every rank's peak.
  const double world = runtime != nullptr ? static_cast<double>(runtime->world_size()) : 1.0;
  if (gflops >= 0 && peak_tflops > 0) record["mfu"] = gflops / (peak_tflops * 1e3 * world);
  if (trained.cpu_threads > 0) {
    record["cpu_threads"] = trained.cpu_threads;
    record["cpu_waited_cores"] = trained.cpu_waited_cores;
  }
  // Megatron's "mtp_1 loss", ...: each depth's loss, unweighted; not in "loss".
  if (!trained.comm.empty()) record["comm"] = trained.comm;
  if (!trained.mtp_losses.empty())
    record["mtp_losses"] = boost::json::array(trained.mtp_losses.begin(), trained.mtp_losses.end());
  plugin_metrics->take_step(record);
  const int64_t done = step + 1;
  const bool log_step = done % log_interval == 0 || done == steps;
  if (log_step) record["memory_per_rank"] = memory_per_rank();
  if (log_step && pp != nullptr) record["microbatches_in_flight_per_stage"] = microbatches_in_flight();
  write_metrics(record, events);
  if (writer)
    progress.step(step, trained.loss, update->last_lr(), tokens_per_s, gflops,
                  record.contains("mfu") ? record.at("mfu").as_double() : -1.0);
  if (!profile) return;
  profile->end_step(trained.seconds);
  if (!log_step) return;
  boost::json::object window{{"event", "profile"}, {"step", done}};
  for (auto& field : profile->take_window()) window.emplace(field.key(), std::move(field.value()));
  write_metrics(window, events);
}

void Trainer::Impl::report_eval(int64_t steps_done, detail::Progress& progress, TrainResult& result,
                                const TrainerEvents& events) {
  const double val = evaluate();
  result.final_val_loss = val;
  write_metrics({{"event", "eval"}, {"step", steps_done}, {"val_loss", val}}, events);
  if (!writer) {
    // The writer's sample runs the model: with divided experts the other ranks join its forwards.
    if (collective_forward && sample_tokens > 0) {
      try {
        sample(steps_done);
      } catch (const std::exception&) {
        // the writer reports it
      }
    }
    return;
  }
  std::string text = "eval at step " + std::to_string(steps_done) + ": val_loss " + std::to_string(val);
  if (sample_tokens > 0) {
    // A sample is there to be read: if it fails, the run goes on to its checkpoint.
    std::string sampled;
    try {
      sampled = sample(steps_done);
    } catch (const std::exception& e) {
      sampled = "(no sample: " + std::string(e.what()) + ")";
    }
    text += "\n--- sample ---\n" + sampled + "\n--------------";
    if (TensorBoardWriter* board = metrics.tensorboard())
      board->text("sample", steps_done, "    " + replace_newlines(sampled, "\n    "));
  }
  progress.line(text);
}

void Trainer::Impl::report_end(detail::Progress& progress, const TrainResult& result) {
  if (!writer) return;
  progress.finish();
  if (profile && !result.losses.empty())
    progress.line("step profile (per step; on a GPU every part is synchronized, so steps are slower):\n" +
                  profile->table());
}

boost::json::array Trainer::Impl::memory_per_rank() const {
  // Parameters, gradients, optimizer state, the update's peaks, and the peak resident memory.
  constexpr int64_t kFields = 7;
  Tensor mine({kFields}, plx_dtype_f64());
  double* m = mine.data<double>();
  const ParameterUpdate::Memory held = update->memory();
  m[0] = held.parameters;
  m[1] = held.gradients;
  m[2] = held.optimizer;
  m[3] = held.peak_parameters;
  m[4] = held.peak_gradients;
  m[5] = static_cast<double>(peak_resident_bytes());
  m[6] = held.peak_parameters_and_gradients;
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

boost::json::object Trainer::Impl::pipeline_layout_record() const {
  boost::json::array chunks;
  for (const ChunkSpec& c : layout.chunks)
    chunks.push_back({{"chunk", c.index},
                      {"stage", c.index % layout.pipeline_size},
                      {"virtual_stage", c.index / layout.pipeline_size},
                      {"layers", boost::json::array{c.first_layer, c.end_layer}},
                      {"embedding", c.embedding},
                      {"output_layers", c.output_layers}});
  return {{"stages", layout.pipeline_size},
          {"virtual_stages", layout.virtual_stages},
          {"microbatches", microbatches},
          {"chunks", std::move(chunks)}};
}

boost::json::array Trainer::Impl::microbatches_in_flight() const {
  Tensor mine({1}, plx_dtype_i64());
  *mine.data<int64_t>() = static_cast<int64_t>(model->peak_microbatches_in_flight());
  Tensor all({pp->size()}, plx_dtype_i64());
  pp->all_gather(mine.view(), all.view());
  return boost::json::array(all.data<int64_t>(), all.data<int64_t>() + pp->size());
}

double Trainer::Impl::evaluate() {
  Batch batch{Tensor({micro_batch_size, seq_length / cp_size}, plx_dtype_i32()),
              Tensor({micro_batch_size, seq_length / cp_size}, plx_dtype_i32())};
  // The validation batches are shared out over the data-parallel ranks and the sum gathered,
  // so the loss is that of all eval_iters batches whatever the number of ranks.
  // With divided experts every rank runs the same number of rounds (a rank past the last batch
  // evaluates one again, for the others' all-to-alls, and does not count it).
  const int64_t rounds = collective_forward ? (eval_iters + data_size - 1) / data_size : 0;
  double sum = 0;
  for (int64_t round = 0, i = data_rank; i < eval_iters || round < rounds; i += data_size, ++round) {
    read_batch(static_cast<uint64_t>(i % eval_iters), batch, true);
    const double loss = model->evaluate(batch);
    if (i < eval_iters) sum += loss;
  }
  // Pipelined, the loss is the last stage's: the stages' sum is it on every stage.
  // Under context parallelism each of a batch's cp ranks adds the mean over its chunks: equal
  // shares of the tokens, so their average is the batch's.
  return over_ranks(over_pipeline(sum), distributed::ReduceOp::sum) /
         static_cast<double>(eval_iters * cp_size);
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

}  // namespace plexus

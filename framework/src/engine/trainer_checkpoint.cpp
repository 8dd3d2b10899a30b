// Saving and resuming a run. A checkpoint holds the parameters under their Megatron names and in
// Megatron's layouts (model.safetensors; spelled as checkpoint.names says, read in either
// spelling: checkpoint/stored_tensor.hpp), the AdamW moments likewise (optimizer.safetensors)
// and state.json: the step, the data position and the whole run config. Because every random
// number is counter-based and the data position is a function of the step, resuming continues
// the run exactly.
#include <boost/json.hpp>
#include <cstring>
#include <deque>

#include "engine/checkpoint_io.hpp"
#include "engine/trainer_impl.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/stored_tensor.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/run_config.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/logging.hpp"

namespace plexus {
namespace checkpoint_io {

// The bytes of a tensor for the writer, as `form` stores it: its own memory on the CPU, a host
// copy on a device, transposed where the checkpoint's layout differs from memory (copies are
// kept alive in `staged`).
checkpoint::TensorData tensor_data(const checkpoint::StoredTensor& form, const Tensor& t,
                                   std::deque<Tensor>& staged) {
  const Tensor* host = &t;
  if (t.device().device_type != kDLCPU) {
    staged.push_back(t.to(DLDevice{kDLCPU, 0}));
    host = &staged.back();
  }
  if (form.transposed) {
    Tensor& stored = staged.emplace_back(form.shape, host->dtype());
    checkpoint::transpose({static_cast<const std::byte*>(host->raw()), host->bytes()}, host->shape()[0],
                          host->shape()[1], sizeof(float),
                          {static_cast<std::byte*>(stored.raw()), stored.bytes()});
    host = &stored;
  }
  return checkpoint::TensorData{form.name,
                                checkpoint::DType::f32,
                                host->shape(),
                                {static_cast<const std::byte*>(host->raw()), host->bytes()}};
}

checkpoint::TensorData tensor_data(const std::string& name, const Tensor& t, checkpoint::NameStyle style,
                                   std::deque<Tensor>& staged) {
  return tensor_data(checkpoint::stored_form(name, t.shape(), style), t, staged);
}


// Every rank's name of the group, in group-rank order, on every rank (as fixed-size records).
std::vector<std::string> gather_names(const distributed::Communicator& group, const std::string& name) {
  constexpr int64_t kNameBytes = 512;
  if (static_cast<int64_t>(name.size()) >= kNameBytes)
    throw std::runtime_error("parameter name " + name + " is too long to gather for a checkpoint (limit " +
                             std::to_string(kNameBytes - 1) + " bytes)");
  const DLDataType bytes_type{kDLUInt, 8, 1};
  const int64_t n = group.size();
  Tensor my_name({kNameBytes}, bytes_type);
  std::memset(my_name.raw(), 0, static_cast<std::size_t>(kNameBytes));
  std::memcpy(my_name.raw(), name.data(), name.size());
  Tensor names({n * kNameBytes}, bytes_type);
  group.all_gather(my_name.view(), names.view());
  std::vector<std::string> out;
  for (int64_t r = 0; r < n; ++r) out.emplace_back(static_cast<const char*>(names.raw()) + r * kNameBytes);
  return out;
}

// Every rank's (name, value) of the group, in group-rank order, on every rank.
std::vector<NamedTensor> gather_named(const distributed::Communicator& group, const std::string& name,
                                      const Tensor& value) {
  const std::vector<std::string> names = gather_names(group, name);
  const int64_t n = group.size();
  const Tensor host = value.device().device_type == kDLCPU ? Tensor() : value.to(DLDevice{kDLCPU, 0});
  const Tensor& mine = value.device().device_type == kDLCPU ? value : host;
  Tensor values({n * mine.numel()}, mine.dtype());
  group.all_gather(mine.view(), values.view());
  std::vector<NamedTensor> out;
  for (int64_t r = 0; r < n; ++r) {
    NamedTensor& t = out.emplace_back(NamedTensor{names[static_cast<std::size_t>(r)], Tensor(mine.shape(), mine.dtype())});
    std::memcpy(t.value.raw(), static_cast<const std::byte*>(values.raw()) + r * static_cast<int64_t>(mine.bytes()),
                mine.bytes());
  }
  return out;
}

void copy_into(Tensor& into, const checkpoint::SafetensorsFile& file,
               const checkpoint::StoredTensor& stored) {
  const auto view = file.tensor(stored.name);  // shapes were checked first
  if (!stored.transposed) {
    device::copy(into.raw(), into.device(), view.bytes.data(), DLDevice{kDLCPU, 0}, into.bytes());
    return;
  }
  Tensor host(into.shape(), into.dtype());
  checkpoint::transpose(view.bytes, stored.shape[0], stored.shape[1], sizeof(float),
                        {static_cast<std::byte*>(host.raw()), host.bytes()});
  device::copy(into.raw(), into.device(), host.raw(), DLDevice{kDLCPU, 0}, into.bytes());
}

// Where each of `tensors` is in `file` (either spelling, either layout of phi), checked against
// what the model expects; the tensors in phi's earlier layout are added to `earlier`.
// `elsewhere`: tensors the file holds that other ranks load (the experts of the rest of the ep
// group), expected in the file but not read here.
std::vector<checkpoint::StoredTensor> locate_all(const checkpoint::SafetensorsFile& file,
                                                 const std::vector<std::pair<std::string, Tensor*>>& tensors,
                                                 checkpoint::NameStyle style,
                                                 std::vector<std::string>& earlier,
                                                 const std::vector<std::pair<std::string, const Tensor*>>& elsewhere) {
  std::vector<checkpoint::StoredTensor> found;
  std::vector<checkpoint::ExpectedTensor> expected;
  for (const auto& [name, tensor] : tensors) {
    found.push_back(checkpoint::locate(file, name, tensor->shape(), style));
    expected.push_back({found.back().name, found.back().shape, checkpoint::DType::f32});
    if (found.back().earlier_layout) earlier.push_back(found.back().name);
  }
  for (const auto& [name, tensor] : elsewhere) {
    const checkpoint::StoredTensor other = checkpoint::locate(file, name, tensor->shape(), style);
    expected.push_back({other.name, other.shape, checkpoint::DType::f32});
  }
  checkpoint::expect_tensors_match(file, expected);
  return found;
}

// One line for a checkpoint holding phi as earlier versions wrote it: read as it is, and
// written in Megatron's layout from the next checkpoint on.
void report_earlier_layout(const std::filesystem::path& dir, const std::vector<std::string>& parameters,
                           const std::vector<std::string>& moments) {
  const std::vector<std::string>& names = parameters.empty() ? moments : parameters;
  if (names.empty()) return;
  log_warn("trainer", "checkpoint " + dir.string() + ": " + names.front() +
                          (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more" : "") +
                          (parameters.empty() ? " optimizer moments" : " mHC projections") +
                          (!parameters.empty() && !moments.empty() ? " (and their optimizer moments)" : "") +
                          " are stored [n*C, n*n+2n], the layout of checkpoints written before \"" +
                          checkpoint::kLinearLayoutKey +
                          "\" existed: read in that layout; new checkpoints store Megatron's [n*n+2n, n*C]");
}

// Where parameter i's two moments start in the optimizer's state tensors: two per parameter in
// parameter order, none for a buffer (PLX_PARAM_BUFFER), which is checkpointed as a value only.
std::vector<std::size_t> moment_positions(const ParameterStore& params) {
  std::vector<std::size_t> first(params.size(), 0);
  std::size_t next = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    first[i] = next;
    if (!params[i].is_buffer()) next += 2;
  }
  return first;
}

}  // namespace checkpoint_io

using namespace checkpoint_io;

boost::json::object Trainer::Impl::checkpoint_state(int64_t steps_done) const {
  return {{"format", "plexus-checkpoint-1"},
          {"step", steps_done},
          {"data_position", steps_done * dp_size * microbatches * micro_batch_size},
          {"global_microbatches", dp_size * microbatches},
          {"config", run_config}};
}

std::filesystem::path Trainer::Impl::save_checkpoint(int64_t steps_done) {
  if (model->sharded() != nullptr) return save_sharded_checkpoint(steps_done);
  const std::filesystem::path root = output_dir / "checkpoints";
  // Under expert parallelism a rank holds only its experts (the parameters whose gradients go
  // over a group other than dp): rank 0 gathers them from its "ep" group, which holds every
  // expert, so the file has each under its global name, whatever the ep size that reads it.
  ParameterStore& params = model->parameters();
  const distributed::Communicator* ep = runtime != nullptr ? runtime->group("ep") : nullptr;
  const bool gather = ep != nullptr && ep->size() > 1;
  const auto expert_parallel = [&](std::size_t i) { return gather && params[i].grad_group != "dp"; };
  std::deque<NamedTensor> gathered;
  std::vector<std::size_t> gathered_from(params.size(), 0);  // index into gathered of param i's first rank
  const auto moments = optimizer->state_tensors();
  const std::vector<std::size_t> moment_of = moment_positions(params);
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!expert_parallel(i)) continue;
    gathered_from[i] = gathered.size();
    const std::size_t m = moment_of[i];
    const std::pair<const std::string*, const Tensor*> parts[] = {{&params[i].name, &params[i].value},
                                                                   {&moments[m].first, moments[m].second},
                                                                   {&moments[m + 1].first, moments[m + 1].second}};
    for (const auto& [name, tensor] : parts)
      for (NamedTensor& g : gather_named(*ep, *name, *tensor)) gathered.push_back(std::move(g));
  }
  if (!writer) {
    // Rank 0 writes; the others wait so that no rank runs ahead of a checkpoint that fails.
    barrier();
    return root / checkpoint::checkpoint_dir_name(steps_done);
  }
  std::vector<checkpoint::TensorData> model_tensors;
  std::vector<checkpoint::TensorData> optimizer_tensors;
  std::deque<Tensor> staged;  // host copies of device tensors, alive (and unmoved) until written
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!expert_parallel(i)) {
      model_tensors.push_back(tensor_data(params[i].name, params[i].value, checkpoint_names, staged));
      if (!params[i].is_buffer())
        for (std::size_t m = moment_of[i]; m < moment_of[i] + 2; ++m)
          optimizer_tensors.push_back(tensor_data(moments[m].first, *moments[m].second, checkpoint_names, staged));
      continue;
    }
    const auto ranks = static_cast<std::size_t>(ep->size());
    for (std::size_t part = 0; part < 3; ++part)
      for (std::size_t r = 0; r < ranks; ++r) {
        const NamedTensor& g = gathered[gathered_from[i] + part * ranks + r];
        (part == 0 ? model_tensors : optimizer_tensors)
            .push_back(tensor_data(g.name, g.value, checkpoint_names, staged));
      }
  }
  const boost::json::object state = checkpoint_state(steps_done);
  std::filesystem::path dir =
      checkpoint::write_checkpoint(root, steps_done, model_tensors, optimizer_tensors, state,
                                   {{checkpoint::kLinearLayoutKey, checkpoint::kLinearLayoutOutIn}});
  for (const auto& removed : checkpoint::prune_checkpoints(root, keep_last))
    Logger::global().log(LogLevel::debug, "trainer", "removed old checkpoint " + removed.string());
  barrier();
  return dir;
}

namespace {

// The main decoder as (symbol, component, checkpoint prefix) per layer, and the final norm's prefix.
std::string decoder_layout(const DecoderPlan& plan) {
  std::string text;
  for (const DecoderLayerPlan& layer : plan.layers)
    if (layer.mtp_depth == 0) text += "  " + layer.checkpoint_prefix + " '" + layer.symbol + "' " + layer.component + "\n";
  return text;
}

std::string decoder_layout_differences(const PluginHost& host, const boost::json::value& saved,
                                       const boost::json::value& current) {
  const DecoderPlan was = plan_decoder(host, saved, false);
  const DecoderPlan now = plan_decoder(host, current, false);
  if (decoder_layout(was) == decoder_layout(now)) return "";
  const auto describe = [](const boost::json::value& config, const DecoderPlan& plan) {
    const auto& model = config.at("model");
    const std::string pattern(model.at("pattern").as_string());
    return (pattern.empty() ? "the GPT of " + std::to_string(model.at("num_layers").to_number<int64_t>()) + " layers"
                            : "the pattern \"" + pattern + "\"") +
           " (" + std::to_string(plan.main_layers()) + " layers)";
  };
  return "\n  decoder: checkpoint " + describe(saved, was) + ", this run " + describe(current, now) +
         "; their layers differ or are stored under other names (plexus checkpoint convert maps a GPT to the "
         "ungrouped layout and back)";
}

}  // namespace

void Trainer::Impl::load_checkpoint(const std::filesystem::path& dir) {
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(dir);
  // A different model cannot continue this one: say which keys differ before any tensor does.
  const boost::json::value* saved_config =
      loaded.state.is_object() ? loaded.state.as_object().if_contains("config") : nullptr;
  if (saved_config == nullptr || !saved_config->is_object() || !saved_config->as_object().contains("model"))
    throw CheckpointError((dir / "state.json").string(), "state.json has no run config (\"config.model\")");
  std::string differences;
  // Keys a checkpoint written before they existed lacks are read at their defaults.
  boost::json::value saved_filled = *saved_config;
  try {
    config::validate(saved_filled, framework_schema());
  } catch (const config::ConfigError& e) {
    throw CheckpointError((dir / "state.json").string(), std::string("its run config is not valid here: ") + e.what());
  }
  saved_config = &saved_filled;
  // The decoder's layout (which layer computes what, under which checkpoint names) rather than the
  // keys that spell it: a GPT of L layers and the pattern "[*-]" x L are the same model.
  differences += decoder_layout_differences(*host, *saved_config, run_config);
  // The model section and the connection (mhc): both shape the parameters. The mHC backend and
  // its options may change: every backend computes the same function.
  const auto mhc_enabled = [](const boost::json::value& config) {
    const boost::json::value* mhc = config.as_object().if_contains("mhc");
    return mhc != nullptr && mhc->is_object() && mhc->as_object().contains("enabled") &&
           mhc->at("enabled") == true;
  };
  const bool compare_mhc = mhc_enabled(*saved_config) || mhc_enabled(run_config);
  for (const char* section : {"model", "mhc"}) {
    if (std::string_view(section) == "mhc" && !compare_mhc) continue;  // plain residual on both sides
    const boost::json::value* was_section = saved_config->as_object().if_contains(section);
    const boost::json::object empty;
    const boost::json::object& was =
        was_section != nullptr && was_section->is_object() ? was_section->as_object() : empty;
    for (const auto& [key, value] : run_config.at(section).as_object()) {
      if (std::string_view(section) == "mhc" && (key == "backend" || key == "options")) continue;
      if (std::string_view(section) == "model" && (key == "num_layers" || key == "pattern")) continue;  // the layout
      const boost::json::value* old = was.if_contains(key);
      // A checkpoint from before the mhc section existed is of a model without mHC.
      const bool same = old != nullptr
                            ? *old == value
                            : std::string_view(section) == "mhc" && key == "enabled" && value == false;
      if (!same)
        differences += "\n  " + std::string(section) + "." + std::string(key) + ": checkpoint " +
                       (old ? boost::json::serialize(*old) : "absent") + ", this run " +
                       boost::json::serialize(value);
    }
  }
  // The data position is a function of the step and the global batch: a run may continue on
  // another number of ranks only with the same number of microbatches per step in all.
  if (const boost::json::value* saved = loaded.state.as_object().if_contains("global_microbatches");
      saved != nullptr && saved->is_int64() && saved->as_int64() != dp_size * microbatches)
    differences += "\n  microbatches per step over all data-parallel ranks: checkpoint " +
                   std::to_string(saved->as_int64()) + ", this run " +
                   std::to_string(dp_size * microbatches) + " (" + std::to_string(dp_size) +
                   " ranks x train.microbatches " + std::to_string(microbatches) + ")";
  if (!differences.empty())
    throw CheckpointError(dir,
                          "the checkpoint is of a different model than this run's config:" + differences);
  if (model->sharded() != nullptr) {
    load_sharded_tensors(dir, loaded);
  } else {
    load_tensors(dir, loaded);
  }
  start_step = loaded.step;
  if (start_step > steps)
    throw CheckpointError(dir.string(), "checkpoint is at step " + std::to_string(start_step) +
                                            ", past train.steps (" + std::to_string(steps) + ")");
  log_info("trainer", "resumed from " + dir.string() + " at step " + std::to_string(start_step));
}

void Trainer::Impl::load_tensors(const std::filesystem::path& dir, const checkpoint::LoadedCheckpoint& loaded) {
  ParameterStore& params = model->parameters();
  std::vector<std::pair<std::string, Tensor*>> parameters;
  for (std::size_t i = 0; i < params.size(); ++i) parameters.emplace_back(params[i].name, &params[i].value);
  const auto moments = optimizer->state_tensors();
  std::vector<std::string> earlier_parameters;
  std::vector<std::string> earlier_moments;
  // Under expert parallelism the file holds every expert; this rank loads its own and expects the
  // others' (named by the ranks of its ep group) to be there too.
  std::vector<std::pair<std::string, const Tensor*>> other_parameters, other_moments;
  if (const distributed::Communicator* ep = runtime != nullptr ? runtime->group("ep") : nullptr;
      ep != nullptr && ep->size() > 1) {
    const std::vector<std::size_t> moment_of = moment_positions(params);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (params[i].grad_group == "dp") continue;
      for (const std::string& name : gather_names(*ep, params[i].name))
        if (name != params[i].name) other_parameters.emplace_back(name, &params[i].value);
      for (std::size_t m = moment_of[i]; m < moment_of[i] + 2; ++m)
        for (const std::string& name : gather_names(*ep, moments[m].first))
          if (name != moments[m].first) other_moments.emplace_back(name, moments[m].second);
    }
  }
  const auto stored_parameters =
      locate_all(loaded.model, parameters, checkpoint_names, earlier_parameters, other_parameters);
  const auto stored_moments = locate_all(loaded.optimizer, moments, checkpoint_names, earlier_moments, other_moments);
  for (std::size_t i = 0; i < parameters.size(); ++i)
    copy_into(*parameters[i].second, loaded.model, stored_parameters[i]);
  for (std::size_t i = 0; i < moments.size(); ++i)
    copy_into(*moments[i].second, loaded.optimizer, stored_moments[i]);
  report_earlier_layout(dir, earlier_parameters, earlier_moments);
}

}  // namespace plexus

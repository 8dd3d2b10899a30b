// Saving and resuming a run. A checkpoint holds the parameters under their Megatron names and in
// Megatron's layouts (model.safetensors; spelled as checkpoint.names says, read in either
// spelling: checkpoint/stored_tensor.hpp), the AdamW moments likewise (optimizer.safetensors)
// and state.json: the step, the data position and the whole run config. Because every random
// number is counter-based and the data position is a function of the step, resuming continues
// the run exactly.
#include <algorithm>
#include <boost/json.hpp>
#include <cstring>
#include <set>

#include "engine/checkpoint_tensors.hpp"
#include "engine/pipeline_checkpoint.hpp"
#include "engine/trainer_impl.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/stored_tensor.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/logging.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus {
namespace {

// `value` (any device) written into `out` as `form` stores it.
void write_stored(const checkpoint::StoredTensor& form, const Tensor& value, std::span<std::byte> out) {
  const Tensor host = value.device().device_type == kDLCPU ? Tensor() : value.to(DLDevice{kDLCPU, 0});
  const Tensor& source = host.empty() ? value : host;
  const std::span<const std::byte> bytes{static_cast<const std::byte*>(source.raw()), source.bytes()};
  if (form.transposed)
    checkpoint::transpose(bytes, source.shape()[0], source.shape()[1], sizeof(float), out);
  else
    std::memcpy(out.data(), bytes.data(), bytes.size());
}

// A tensor a checkpoint must hold: its names and its in-memory shape, and whether its rows are
// the padded vocabulary (PLX_PARAM_VOCABULARY: another padding loads).
struct Wanted {
  checkpoint::TensorNames names;
  std::vector<int64_t> shape;
  bool vocabulary = false;
};

// Where each of `tensors` is in `file` (either spelling or an alias, either layout of phi),
// checked against what the model expects; the tensors in phi's earlier layout are added to
// `earlier`. `elsewhere`: tensors the file holds that other ranks load (the experts of the rest of
// the ep group), expected in the file but not read here; `others_allowed`: the file may hold
// tensors this rank does not list (a pipeline stage loads its own part of the model).
// `vocabulary`: the model's vocabulary size; a tensor of vocabulary rows may hold another number of
// them, as long as both hold the vocabulary (it is added to `repadded`).
std::vector<checkpoint::StoredTensor> locate_all(const checkpoint::SafetensorsFile& file,
                                                 const std::vector<Wanted>& tensors,
                                                 checkpoint::NameStyle style,
                                                 std::vector<std::string>& earlier,
                                                 const std::vector<Wanted>& elsewhere, bool others_allowed,
                                                 int64_t vocabulary, std::vector<std::string>& repadded) {
  std::vector<checkpoint::StoredTensor> found;
  std::vector<checkpoint::ExpectedTensor> expected;
  for (const Wanted& t : tensors) {
    found.push_back(checkpoint::locate(file, t.names, t.shape, style));
    if (t.vocabulary && file.contains(found.back().name)) {
      const auto& stored = file.info(found.back().name).shape;
      if (stored.size() == t.shape.size() && !stored.empty() && stored[0] != t.shape[0] &&
          stored[0] >= vocabulary && std::equal(stored.begin() + 1, stored.end(), t.shape.begin() + 1)) {
        found.back().shape.assign(stored.begin(), stored.end());
        repadded.push_back(found.back().name);
      }
    }
    expected.push_back({found.back().name, found.back().shape, checkpoint::DType::f32});
    if (found.back().earlier_layout) earlier.push_back(found.back().name);
  }
  for (const Wanted& t : elsewhere) {
    const checkpoint::StoredTensor other = checkpoint::locate(file, t.names, t.shape, style);
    expected.push_back({other.name, other.shape, checkpoint::DType::f32});
  }
  if (others_allowed) {
    std::set<std::string> listed;
    for (const auto& e : expected) listed.insert(e.name);
    for (const std::string& name : file.names())
      if (!listed.contains(name)) {
        const checkpoint::TensorInfo& info = file.info(name);
        expected.push_back({name, info.shape, info.dtype});
      }
  }
  checkpoint::expect_tensors_match(file, expected);
  return found;
}

// A parameter's names in a checkpoint: its own, the Transformer Engine spelling its layer
// declares, and, under the final norm, the final norm's other prefixes the stack names.
checkpoint::TensorNames names_of(const Parameter& p, const DecoderPlan& plan) {
  checkpoint::TensorNames names{p.name, p.te_name.empty() ? p.name : p.te_name, {}};
  if (p.name.starts_with(plan.final_norm_prefix))
    for (const std::string& alias : plan.final_norm_aliases)
      names.aliases.push_back(alias + p.name.substr(plan.final_norm_prefix.size()));
  return names;
}

// Every ep rank's names of a parameter divided over the ep group (an expert), in ep-rank order.
std::vector<checkpoint::TensorNames> expert_names(const distributed::Communicator& ep,
                                                  const checkpoint::TensorNames& mine) {
  const std::vector<std::string> local = gather_names(ep, mine.local);
  const std::vector<std::string> te = gather_names(ep, mine.te);
  std::vector<checkpoint::TensorNames> out;
  for (std::size_t r = 0; r < local.size(); ++r) out.push_back({local[r], te[r], {}});
  return out;
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

}  // namespace

namespace {

// What a checkpoint's walk reads: every parameter's whole value and moments through the update
// (under a strategy each gathers its unit: every rank walks the same order), and under expert
// parallelism every ep rank's experts, gathered once per tensor (the walk reaches a tensor's
// ranks one after another).
class SaveWalk {
 public:
  SaveWalk(ParameterUpdate& update, const ParameterStore& params, const distributed::Communicator* ep,
           const Model& model)
      : update_(update), params_(params), ep_(ep), model_(model) {}
  ~SaveWalk() {
    try {
      update_.end_save();
    } catch (const std::exception& e) {
      log_warn("trainer", std::string("releasing a unit after a checkpoint: ") + e.what());
    }
  }
  SaveWalk(const SaveWalk&) = delete;
  SaveWalk& operator=(const SaveWalk&) = delete;

  // Whole: a tensor-parallel shard is gathered over the group it is split over, tp or the
  // experts' expert_tp (collective: every rank of it walks alike).
  const Tensor& value(std::size_t p) {
    const Tensor& local = update_.saved_value(p);
    if (!params_[p].tp.split()) return local;
    whole_ = gather_whole(*model_.split_group(params_[p].tp), params_[p].tp, local);
    return whole_;
  }
  Tensor moment(std::size_t p, int which) {
    Tensor local = update_.saved_moment(p, which);
    if (!params_[p].tp.split()) return local;
    return gather_whole(*model_.split_group(params_[p].tp), params_[p].tp, local);
  }
  const NamedTensor& expert_value(std::size_t p, std::size_t rank) {
    if (!cached(p, kValue)) gathered_ = gather_named(*ep_, params_[p].name, value(p));
    return gathered_.at(rank);
  }
  const NamedTensor& expert_moment(std::size_t p, int which, std::size_t rank) {
    if (!cached(p, which)) {
      const Tensor mine = moment(p, which);
      Tensor copy(mine.shape(), mine.dtype(), mine.device());
      copy.copy_from(mine);
      gathered_ = gather_named(*ep_, params_[p].name + kMomentSuffix[which], copy);
    }
    return gathered_.at(rank);
  }

 private:
  static constexpr int kValue = -1;
  bool cached(std::size_t p, int which) {
    const bool hit = gathered_param_ == p && gathered_which_ == which;
    gathered_param_ = p;
    gathered_which_ = which;
    return hit;
  }
  ParameterUpdate& update_;
  const ParameterStore& params_;
  const distributed::Communicator* ep_;
  const Model& model_;
  Tensor whole_;  // value()'s gathered tensor
  std::vector<NamedTensor> gathered_;
  std::size_t gathered_param_ = static_cast<std::size_t>(-1);
  int gathered_which_ = kValue;
};

}  // namespace

boost::json::object Trainer::Impl::checkpoint_state(int64_t steps_done) const {
  return {{"format", "plexus-checkpoint-1"},
          {"step", steps_done},
          {"data_position", steps_done * data_size * microbatches * micro_batch_size},
          {"global_microbatches", data_size * microbatches},
          {"config", run_config}};
}

// The files list every tensor in parameter order: a parameter's value in model.safetensors, its
// two moments in optimizer.safetensors, each filled when the writer reaches it, so no rank holds
// more than one unit's whole values (and one tensor's experts) at a time. Under expert
// parallelism every rank lists every expert under its global name (the names of its ep group),
// whatever the ep size that reads it. Rank 0 writes; the others run the same fills (their
// gathers are collective) and discard the bytes.
std::filesystem::path Trainer::Impl::save_checkpoint(int64_t steps_done) {
  const std::filesystem::path root = output_dir / "checkpoints";
  const ParameterStore& params = model->parameters();
  const distributed::Communicator* ep = runtime != nullptr ? runtime->group("ep") : nullptr;
  const bool experts_divided = ep != nullptr && ep->size() > 1;
  const std::vector<uint32_t> chunk_of = model->parameter_chunks();
  SaveWalk walk(*update, params, ep, *model);
  ChunkedEntries model_entries, optimizer_entries;
  // One tensor of parameter p: its stored form, and the fill that produces its bytes.
  const auto add = [&](ChunkedEntries& entries, std::size_t p, const checkpoint::TensorNames& names,
                       std::function<void(const checkpoint::StoredTensor&, std::span<std::byte>)> fill) {
    const checkpoint::StoredTensor form =
        checkpoint::stored_form(names, params[p].whole_shape, checkpoint_names);
    checkpoint::TensorData t;
    t.name = form.name;
    t.dtype = checkpoint::DType::f32;
    t.shape = form.shape;
    t.fill = [form, fill = std::move(fill)](std::span<std::byte> out) { fill(form, out); };
    entries.tensors.push_back(std::move(t));
    entries.chunks.push_back(chunk_of[p]);
  };
  for (std::size_t p = 0; p < params.size(); ++p) {
    const Parameter& param = params[p];
    if (pp != nullptr && !stages.owned[p]) continue;  // a tied copy: its owner's stage writes it
    const checkpoint::TensorNames names = names_of(param, model->plan());
    if (param.is_buffer()) {  // whole on every rank, in the store; no moments
      add(model_entries, p, names,
          [&, p](const auto& form, std::span<std::byte> out) { write_stored(form, params[p].value, out); });
      continue;
    }
    if (experts_divided && param.divided_over_ep()) {
      const std::vector<checkpoint::TensorNames> ranks = expert_names(*ep, names);
      for (std::size_t r = 0; r < ranks.size(); ++r)
        add(model_entries, p, ranks[r], [&, p, r](const auto& form, std::span<std::byte> out) {
          write_stored(form, walk.expert_value(p, r).value, out);
        });
      for (int which = 0; which < 2; ++which)
        for (std::size_t r = 0; r < ranks.size(); ++r)
          add(optimizer_entries, p, ranks[r].with_suffix(kMomentSuffix[which]),
              [&, p, r, which](const auto& form, std::span<std::byte> out) {
                write_stored(form, walk.expert_moment(p, which, r).value, out);
              });
      continue;
    }
    add(model_entries, p, names,
        [&, p](const auto& form, std::span<std::byte> out) { write_stored(form, walk.value(p), out); });
    for (int which = 0; which < 2; ++which)
      add(optimizer_entries, p, names.with_suffix(kMomentSuffix[which]),
          [&, p, which](const auto& form, std::span<std::byte> out) {
            write_stored(form, walk.moment(p, which), out);
          });
  }
  if (pp != nullptr) {  // one set of files for every stage (pipeline_checkpoint.hpp)
    if (writer)
      merge_from_stages(*pp, model_entries, optimizer_entries);
    else if (sends_to_writer)
      send_to_writer(*pp, model_entries, optimizer_entries);
  }
  std::filesystem::path dir = root / checkpoint::checkpoint_dir_name(steps_done);
  if (writer) {
    dir = checkpoint::write_checkpoint(root, steps_done, model_entries.tensors, optimizer_entries.tensors,
                                       checkpoint_state(steps_done),
                                       {{checkpoint::kLinearLayoutKey, checkpoint::kLinearLayoutOutIn}});
    for (const auto& removed : checkpoint::prune_checkpoints(root, keep_last))
      Logger::global().log(LogLevel::debug, "trainer", "removed old checkpoint " + removed.string());
  } else {
    checkpoint::run_checkpoint_fills(model_entries.tensors, optimizer_entries.tensors);
  }
  update->end_save();
  barrier();
  return dir;
}

namespace {

// The decoder as (checkpoint prefix, symbol, component) per layer, the MTP blocks' included.
std::string decoder_layout(const DecoderPlan& plan) {
  std::string text;
  for (const DecoderLayerPlan& layer : plan.layers)
    text += "  " + layer.checkpoint_prefix + " '" + layer.symbol + "' " + layer.component + "\n";
  return text;
}

std::string decoder_layout_differences(const PluginHost& host, const boost::json::value& saved,
                                       const boost::json::value& current) {
  const DecoderPlan was = plan_decoder(host, saved, false);
  const DecoderPlan now = plan_decoder(host, current, false);
  if (decoder_layout(was) == decoder_layout(now)) return "";
  const auto describe = [](const DecoderPlan& plan) {
    return plan.summary + " (" + std::to_string(plan.main_layers()) + " layers)";
  };
  return "\n  decoder: checkpoint " + describe(was) + ", this run " + describe(now) +
         "; their layers differ or are stored under other names (plexus checkpoint convert maps a GPT to the "
         "ungrouped layout and back)";
}

}  // namespace

namespace {

// A saved model key's value, and if it is a component section ({"component", "options"}) of a
// layer loaded here, with its options' defaults filled in as this run's are: a layer that gained
// an option with a default reads an older checkpoint's section as it was meant.
boost::json::value with_option_defaults(const PluginHost& host, const boost::json::value& saved,
                                        const std::string& path) {
  if (!saved.is_object()) return saved;
  const boost::json::object& section = saved.as_object();
  const boost::json::value* component = section.if_contains("component");
  if (component == nullptr || !component->is_string()) return saved;
  const Component* layer = host.find(PLX_KIND_LAYER, std::string(component->as_string()));
  if (layer == nullptr) return saved;
  boost::json::value filled = saved;
  try {
    const boost::json::value* options = section.if_contains("options");
    filled.as_object()["options"] = validated_component_options(
        *layer, options != nullptr ? *options : boost::json::value(), path + ".options");
  } catch (const std::exception&) {
    return saved;  // options this layer no longer takes: they differ, as they are
  }
  return filled;
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
    validate_saved_run_config(*host, saved_filled);
  } catch (const config::ConfigError& e) {
    throw CheckpointError((dir / "state.json").string(),
                          std::string("its run config is not valid here: ") + e.what());
  }
  saved_config = &saved_filled;
  // The decoder's layout (which layer computes what, under which checkpoint names) rather than the
  // keys that spell it (the stack names them): a GPT of L layers and the pattern "[*-]" x L are
  // the same model.
  differences += decoder_layout_differences(*host, *saved_config, run_config);
  // The model section and the connection (mhc): both shape the parameters. The mHC backend and
  // its options may change: every backend computes the same function.
  const auto mhc_enabled = [](const boost::json::value& config) {
    const boost::json::value* mhc = config.as_object().if_contains("mhc");
    return mhc != nullptr && mhc->is_object() && mhc->as_object().contains("enabled") &&
           mhc->at("enabled") == true;
  };
  const bool compare_mhc = mhc_enabled(*saved_config) || mhc_enabled(run_config);
  const std::vector<std::string>& layout_keys = model->plan().layout_keys;
  const auto is_layout_key = [&](std::string_view key) {
    return std::find(layout_keys.begin(), layout_keys.end(), key) != layout_keys.end();
  };
  for (const char* section : {"model", "mhc"}) {
    if (std::string_view(section) == "mhc" && !compare_mhc) continue;  // plain residual on both sides
    const boost::json::value* was_section = saved_config->as_object().if_contains(section);
    const boost::json::object empty;
    const boost::json::object& was =
        was_section != nullptr && was_section->is_object() ? was_section->as_object() : empty;
    for (const auto& [key, value] : run_config.at(section).as_object()) {
      if (std::string_view(section) == "mhc" && (key == "backend" || key == "options")) continue;
      if (std::string_view(section) == "model" && is_layout_key(key)) continue;  // compared as the layout
      // A loss weight, how the model is run over tp and which attention kernel computes it, not
      // the model: a run may continue with another.
      if (std::string_view(section) == "model" &&
          (key == "mtp_loss_scaling_factor" || key == "sequence_parallel" || key == "attention_backend" ||
           key == "cp_comm_type"))
        continue;
      const boost::json::value* old = was.if_contains(key);
      // A component section saved before its component gained an option holds it at its default.
      // Both sides with their defaults, then: the run's own may be filled in or not.
      const std::string path = std::string(section) + "." + std::string(key);
      // A checkpoint from before the mhc section existed is of a model without mHC.
      const bool same =
          old != nullptr ? with_option_defaults(*host, *old, path) == with_option_defaults(*host, value, path)
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
      saved != nullptr && saved->is_int64() && saved->as_int64() != data_size * microbatches)
    differences += "\n  microbatches per step over all data-parallel ranks: checkpoint " +
                   std::to_string(saved->as_int64()) + ", this run " +
                   std::to_string(data_size * microbatches) + " (" + std::to_string(data_size) +
                   " ranks x train.microbatches " + std::to_string(microbatches) + ")";
  if (!differences.empty())
    throw CheckpointError(dir,
                          "the checkpoint is of a different model than this run's config:" + differences);
  load_tensors(dir, loaded);
  start_step = loaded.step;
  if (start_step > steps)
    throw CheckpointError(dir.string(), "checkpoint is at step " + std::to_string(start_step) +
                                            ", past train.steps (" + std::to_string(steps) + ")");
  log_info("trainer", "resumed from " + dir.string() + " at step " + std::to_string(start_step));
}

// Every tensor is found and checked (names in either spelling, shapes, phi's layout) before any
// is read; then the values are written unit by unit through the model's residency and the
// moments through the update, each rank keeping its part.
void Trainer::Impl::load_tensors(const std::filesystem::path& dir,
                                 const checkpoint::LoadedCheckpoint& loaded) {
  ParameterStore& params = model->parameters();
  std::vector<Wanted> parameters, moments;
  std::vector<std::size_t> moment_of(params.size(), 0);  // where parameter p's two moments start in `moments`
  for (std::size_t p = 0; p < params.size(); ++p) {
    const checkpoint::TensorNames names = names_of(params[p], model->plan());
    const bool vocabulary = params[p].vocabulary_rows();
    parameters.push_back({names, params[p].whole_shape, vocabulary});
    moment_of[p] = moments.size();
    if (params[p].is_buffer()) continue;  // checkpointed as a value only
    for (const char* suffix : kMomentSuffix)
      moments.push_back({names.with_suffix(suffix), params[p].whole_shape, vocabulary});
  }
  // Under expert parallelism the file holds every expert; this rank loads its own and expects the
  // others' (named by the ranks of its ep group) to be there too.
  std::vector<Wanted> other_parameters, other_moments;
  if (const distributed::Communicator* ep = runtime != nullptr ? runtime->group("ep") : nullptr;
      ep != nullptr && ep->size() > 1) {
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (!params[p].divided_over_ep()) continue;
      const int64_t mine = ep->rank();
      const std::vector<checkpoint::TensorNames> ranks = expert_names(*ep, parameters[p].names);
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        if (static_cast<int64_t>(r) == mine) continue;
        other_parameters.push_back({ranks[r], params[p].shape});
        for (const char* suffix : kMomentSuffix)
          other_moments.push_back({ranks[r].with_suffix(suffix), params[p].shape});
      }
    }
  }
  std::vector<std::string> earlier_parameters, earlier_moments, repadded, repadded_moments;
  const bool stage = pp != nullptr;  // the file holds every stage's tensors
  const int64_t vocabulary = model->settings().vocab_size;
  const auto stored_parameters = locate_all(loaded.model, parameters, checkpoint_names, earlier_parameters,
                                            other_parameters, stage, vocabulary, repadded);
  const auto stored_moments = locate_all(loaded.optimizer, moments, checkpoint_names, earlier_moments,
                                         other_moments, stage, vocabulary, repadded_moments);
  for (const std::string& name : repadded)
    log_warn("trainer",
             "checkpoint " + dir.string() + ": " + name + " has " +
                 std::to_string(loaded.model.info(name).shape[0]) +
                 " rows and this run pads the vocabulary to " +
                 std::to_string(model->settings().padded_vocab_size) +
                 ": the rows both paddings hold are loaded, new rows are zero (Megatron's rule for "
                 "another padding); the padded rows' logits enter the softmax, so this is a small "
                 "change of the model");
  model->write_parameters(
      [&](std::size_t p) { read_tensor(params[p].value, loaded.model, stored_parameters[p], params[p].tp); });
  update->load_moments([&](std::size_t p, int which, Tensor& whole) {
    read_tensor(whole, loaded.optimizer, stored_moments[moment_of[p] + static_cast<std::size_t>(which)],
                params[p].tp);
  });
  report_earlier_layout(dir, earlier_parameters, earlier_moments);
}

}  // namespace plexus

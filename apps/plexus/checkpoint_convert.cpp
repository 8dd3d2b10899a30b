#include "checkpoint_convert.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "plexus/core/config.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/plugin.h"

namespace plexus::cli {
namespace {

namespace fs = std::filesystem;
namespace ck = checkpoint;

// The physical layers of a pattern's main decoder, for model.num_layers (Megatron's rule): its
// symbols before any '/', brackets and '|' aside. A pattern this miscounts is one the stack refuses.
std::int64_t pattern_layers(const std::string& pattern) {
  std::int64_t count = 0;
  for (const char c : pattern.substr(0, pattern.find('/')))
    if (c != '[' && c != ']' && c != '|') ++count;
  return count;
}

// The model sections the framework names whose components a model is built of besides its decoder
// layers (embedding, final norm, head; mHC's backend when enabled): not the scheduler nor the
// data-parallel strategy, which building a model to read its names does not need.
bool builds_the_model(const ComponentRef& ref) {
  return ref.section.starts_with("model.") || ref.section == "mhc";
}

// The object at a dotted path of config ("model.embedding"), which component_refs found there.
boost::json::object& object_at(boost::json::value& config, const std::string& path) {
  boost::json::value* node = &config;
  for (std::size_t begin = 0; begin <= path.size();) {
    const std::size_t end = std::min(path.find('.', begin), path.size());
    node = &node->as_object().at(path.substr(begin, end - begin));
    begin = end + 1;
  }
  return node->as_object();
}

}  // namespace

SavedModel::SavedModel(const ck::LoadedCheckpoint& loaded, const PluginLoadOptions& plugins)
    : plugins_(plugins), state_file_(loaded.dir / ck::kStateFile) {
  const boost::json::value* run_config =
      loaded.state.is_object() ? loaded.state.as_object().if_contains("config") : nullptr;
  if (run_config == nullptr || !run_config->is_object() || !run_config->as_object().contains("model") ||
      !run_config->at("model").is_object())
    throw CheckpointError(state_file_,
                          "has no run config (\"config.model\"): the decoder's layout is unknown");
  saved_ = *run_config;
  // The framework's keys first: they name the stack and where plugins are looked for. The stack's
  // own model keys are filled once its plugin is loaded, as a resume fills them.
  boost::json::value framework_filled = saved_;
  try {
    config::validate(framework_filled, framework_schema());
  } catch (const config::ConfigError& e) {
    throw CheckpointError(state_file_, std::string("its run config is not valid here: ") + e.what());
  }
  (void)ensure_component(host_, PLX_KIND_STACK,
                         std::string(framework_filled.at("model").at("stack").at("component").as_string()),
                         "model.stack.component", plugins_, framework_filled);
  config_ = saved_;
  try {
    validate_saved_run_config(host_, config_);
  } catch (const config::ConfigError& e) {
    throw CheckpointError(state_file_, std::string("its run config is not valid here: ") + e.what());
  }
}

DecoderPlan SavedModel::plan(const boost::json::value& config, const std::string& context) const {
  try {
    return plan_decoder(host_, config, false);
  } catch (const std::exception& e) {
    throw std::runtime_error(context + ": " + e.what());
  }
}

DecoderPlan SavedModel::gpt_plan(std::size_t layers) const {
  return plan(
      with_decoder(config_, "", static_cast<std::int64_t>(layers)),
      "the GPT of " + std::to_string(layers) + " layers of " + state_file_.string() + "'s run config");
}

LayerModules SavedModel::layer_modules(const boost::json::value& config, const std::string& context) {
  try {
    boost::json::value built = config;
    // Nothing runs: the model is built only for its layers' tensor names, so on the CPU in float32
    // whatever the run trained on (converting a checkpoint needs no GPU).
    boost::json::object& run = built.at("run").as_object();
    run["device"] = "cpu";
    run["precision"] = "fp32";
    for (const DecoderLayerPlan& layer : plan_decoder(host_, built, false).layers)
      (void)ensure_component(host_, PLX_KIND_LAYER, layer.component, layer.component_key, plugins_, built);
    for (const ComponentRef& ref : component_refs(built)) {
      if (!builds_the_model(ref)) continue;
      const Component& component =
          ensure_component(host_, ref.kind, ref.name, ref.section + "." + ref.key, plugins_, built);
      boost::json::object& section = object_at(built, ref.section);
      section["options"] =
          validated_component_options(component, section["options"], ref.section + ".options");
    }
    const Model model(host_, built, ModelOptions{{}, true});
    return cli::layer_modules(model);
  } catch (const std::exception& e) {
    throw std::runtime_error(context + ": " + e.what());
  }
}

boost::json::value with_decoder(boost::json::value config, const std::string& pattern,
                                std::int64_t num_layers) {
  boost::json::object& model = config.at("model").as_object();
  model["pattern"] = pattern;
  model["num_layers"] = num_layers;
  return config;
}

namespace {

struct Renamed {
  std::vector<ck::TensorData> tensors;
  std::size_t changed = 0;
};

// Every tensor of file under its destination name; the bytes stay those of the (open) file.
Renamed renamed_tensors(const ck::SafetensorsFile& file, const LayoutRenaming& renaming) {
  Renamed out;
  std::map<std::string, std::string> sources;  // destination name -> source name
  for (const ck::TensorView& view : file.tensors()) {
    const std::string name(view.name);
    std::string target;
    try {
      target = renaming.rename(name);
    } catch (const std::invalid_argument& e) {
      throw CheckpointError(file.path(), e.what());
    }
    if (const auto [at, inserted] = sources.emplace(target, name); !inserted)
      throw CheckpointError(file.path(),
                            "tensors " + at->second + " and " + name + " would both become " + target);
    out.changed += target != name ? 1 : 0;
    out.tensors.push_back({target, view.dtype, {view.shape.begin(), view.shape.end()}, view.bytes});
  }
  return out;
}

}  // namespace

ConvertResult convert_checkpoint(const ConvertRequest& request) {
  std::error_code ec;
  if (const auto type = fs::symlink_status(request.destination, ec).type(); type != fs::file_type::not_found)
    throw CheckpointError(
        request.destination,
        ec ? "cannot inspect: " + ec.message()
           : "already exists: the converted checkpoint goes to a new path (nothing is ever replaced)");
  const ck::LoadedCheckpoint loaded = ck::load_checkpoint(request.source);
  SavedModel saved(loaded, request.plugins);
  const boost::json::value& config = saved.config();
  const std::string source_config = saved.state_file().string();

  const DecoderPlan from = saved.plan(config, source_config);
  const GptPlanner gpt = [&](std::size_t layers) { return saved.gpt_plan(layers); };
  const std::size_t gpt_layers =
      check_gpt_compatible(from, gpt, "the checkpoint's decoder (" + from.summary + ")");
  const bool from_gpt = storage_layout(gpt(gpt_layers)) == storage_layout(from);

  std::string pattern;
  std::int64_t num_layers = static_cast<std::int64_t>(gpt_layers);
  if (request.direction == Direction::gpt_to_hybrid) {
    if (!from_gpt)
      throw std::invalid_argument(
          "the checkpoint is not a GPT: its decoder is " + from.summary +
          ", stored under other names; --direction hybrid-to-gpt converts it to the GPT");
    pattern = request.pattern;
    if (pattern.empty())
      for (std::size_t i = 0; i < gpt_layers; ++i) pattern += "*-";
    num_layers = pattern_layers(pattern);
  } else {
    if (from_gpt)
      throw std::invalid_argument("the checkpoint already stores a GPT's tensors (" + from.summary +
                                  "): it resumes as the GPT unconverted");
    // The pattern given is checked as a decoder, not as text: the stack's plan of it must store
    // what the checkpoint's decoder stores.
    if (!request.pattern.empty()) {
      const std::string given = "--hybrid-layer-pattern \"" + request.pattern + "\"";
      if (storage_layout(saved.plan(with_decoder(config, request.pattern, pattern_layers(request.pattern)),
                                    given)) != storage_layout(from))
        throw std::invalid_argument(given + " is not the checkpoint's decoder, " + from.summary + " (" +
                                    source_config + ")");
    }
  }
  const boost::json::value target = with_decoder(config, pattern, num_layers);
  const DecoderPlan to =
      saved.plan(target, pattern.empty() ? "the GPT" : "--hybrid-layer-pattern \"" + pattern + "\"");
  if (const std::size_t to_layers =
          check_gpt_compatible(to, gpt, "the destination's decoder (" + to.summary + ")");
      to_layers != gpt_layers)
    throw std::invalid_argument("the destination's decoder (" + to.summary + ") holds the layers of " +
                                gpt(to_layers).summary + ", the checkpoint those of " +
                                gpt(gpt_layers).summary);
  if (request.direction == Direction::gpt_to_hybrid && storage_layout(gpt(gpt_layers)) == storage_layout(to))
    throw std::invalid_argument(
        "the pattern \"" + pattern +
        "\" stores a GPT's tensors under the GPT's names: the checkpoint resumes with it "
        "unconverted");

  // Which module of a group is which layer's, the source's layers say themselves (their tensor
  // names); a decoder whose layers each have a prefix of their own needs no model built.
  const LayerModules modules =
      shares_prefixes(from) ? saved.layer_modules(config, "the checkpoint's model (" + source_config + ")")
                            : LayerModules{};
  const LayoutRenaming renaming(from, to, modules);
  const Renamed model = renamed_tensors(loaded.model, renaming);
  const Renamed optimizer = renamed_tensors(loaded.optimizer, renaming);
  // Everything but the decoder's description stays: step, data position, the rest of the config.
  boost::json::value state = loaded.state;
  state.as_object()["config"] = with_decoder(saved.saved(), pattern, num_layers);
  // The files' own metadata (the weight layout marker, ...) carries over; the writer adds the step.
  std::map<std::string, std::string> metadata = loaded.model.metadata();
  metadata.erase("plexus.step");
  const fs::path written = ck::create_checkpoint(request.destination, loaded.step, model.tensors,
                                                 optimizer.tensors, state, metadata);

  ConvertResult result;
  result.destination = written;
  result.step = loaded.step;
  result.from = from.summary;
  result.to = to.summary;
  result.pattern = pattern;
  result.num_layers = num_layers;
  result.model_tensors = model.tensors.size();
  result.optimizer_tensors = optimizer.tensors.size();
  result.renamed = model.changed + optimizer.changed;
  return result;
}

}  // namespace plexus::cli

#include "checkpoint_convert.hpp"

#include <boost/json.hpp>

#include <map>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "checkpoint_rename.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/plugin.h"

namespace plexus::cli {
namespace {

namespace fs = std::filesystem;
namespace ck = checkpoint;

std::string pattern_of(const boost::json::value& config) {
  const boost::json::value* pattern = config.at("model").as_object().if_contains("pattern");
  return pattern != nullptr && pattern->is_string() ? std::string(pattern->as_string()) : std::string();
}

std::int64_t num_layers_of(const boost::json::value& config) {
  return config.at("model").at("num_layers").to_number<std::int64_t>();
}

// The physical layers of a pattern's main decoder, for model.num_layers (Megatron's rule): its
// symbols before any '/', brackets and '|' aside. A pattern this miscounts is one the stack refuses.
std::int64_t pattern_layers(const std::string& pattern) {
  std::int64_t count = 0;
  for (const char c : pattern.substr(0, pattern.find('/')))
    if (c != '[' && c != ']' && c != '|') ++count;
  return count;
}

std::string describe(const boost::json::value& config) {
  const std::string pattern = pattern_of(config);
  return pattern.empty() ? "the GPT of " + std::to_string(num_layers_of(config)) + " layers"
                         : "the pattern \"" + pattern + "\"";
}

// config with the decoder described by (pattern, num_layers), every other key as it was.
boost::json::value with_decoder(boost::json::value config, const std::string& pattern,
                                std::int64_t num_layers) {
  boost::json::object& model = config.at("model").as_object();
  model["pattern"] = pattern;
  model["num_layers"] = num_layers;
  return config;
}

// The run config a checkpoint was written with, defaults filled as a resume fills them.
boost::json::value filled_config(const ck::LoadedCheckpoint& loaded, boost::json::value& saved) {
  const fs::path state_file = loaded.dir / ck::kStateFile;
  const boost::json::value* run_config =
      loaded.state.is_object() ? loaded.state.as_object().if_contains("config") : nullptr;
  if (run_config == nullptr || !run_config->is_object() || !run_config->as_object().contains("model") ||
      !run_config->at("model").is_object())
    throw CheckpointError(state_file,
                          "has no run config (\"config.model\"): the decoder's layout is unknown");
  saved = *run_config;
  boost::json::value filled = saved;
  try {
    config::validate(filled, framework_schema());
  } catch (const config::ConfigError& e) {
    throw CheckpointError(state_file, std::string("its run config is not valid here: ") + e.what());
  }
  return filled;
}

DecoderPlan plan_of(const PluginHost& host, const boost::json::value& config, const std::string& context) {
  try {
    return plan_decoder(host, config, false);
  } catch (const std::exception& e) {
    throw std::runtime_error(context + ": " + e.what());
  }
}

bool is_gpt_layout(const PluginHost& host, const boost::json::value& config, const DecoderPlan& plan,
                   std::size_t gpt_layers) {
  const DecoderPlan gpt =
      plan_of(host, with_decoder(config, "", static_cast<std::int64_t>(gpt_layers)), "the GPT");
  return storage_layout(gpt) == storage_layout(plan);
}

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
  boost::json::value saved;
  const boost::json::value config = filled_config(loaded, saved);
  const std::string source_config = (loaded.dir / ck::kStateFile).string();

  PluginHost host;
  (void)ensure_component(host, PLX_KIND_STACK,
                         std::string(config.at("model").at("stack").at("component").as_string()),
                         "model.stack.component", request.plugins, config);
  const DecoderPlan from = plan_of(host, config, source_config);
  const std::string from_text = describe(config);
  const std::size_t gpt_layers = check_gpt_compatible(from, "the checkpoint's decoder (" + from_text + ")");
  const bool from_gpt = is_gpt_layout(host, config, from, gpt_layers);

  std::string pattern;
  std::int64_t num_layers = static_cast<std::int64_t>(gpt_layers);
  if (request.direction == Direction::gpt_to_hybrid) {
    if (!from_gpt)
      throw std::invalid_argument(
          "the checkpoint is not a GPT: its decoder is " + from_text +
          ", stored under other names; --direction hybrid-to-gpt converts it to the GPT");
    pattern = request.pattern;
    if (pattern.empty())
      for (std::size_t i = 0; i < gpt_layers; ++i) pattern += "*-";
    num_layers = pattern_layers(pattern);
  } else {
    if (from_gpt)
      throw std::invalid_argument("the checkpoint already stores a GPT's tensors (" + from_text +
                                  "): it resumes as the GPT unconverted");
    if (!request.pattern.empty() && request.pattern != pattern_of(config))
      throw std::invalid_argument("--hybrid-layer-pattern \"" + request.pattern +
                                  "\" is not the checkpoint's pattern \"" + pattern_of(config) + "\" (" +
                                  source_config + ")");
  }
  const boost::json::value target = with_decoder(config, pattern, num_layers);
  const std::string to_text = describe(target);
  const DecoderPlan to =
      plan_of(host, target, pattern.empty() ? "the GPT" : "--hybrid-layer-pattern \"" + pattern + "\"");
  if (const std::size_t to_layers = check_gpt_compatible(to, "the destination's decoder (" + to_text + ")");
      to_layers != gpt_layers)
    throw std::invalid_argument("the pattern \"" + pattern + "\" has " + std::to_string(to_layers) +
                                " attention and MLP layers each, the checkpoint " +
                                std::to_string(gpt_layers) + " (" + from_text + ")");
  if (request.direction == Direction::gpt_to_hybrid && is_gpt_layout(host, target, to, gpt_layers))
    throw std::invalid_argument(
        "the pattern \"" + pattern +
        "\" stores a GPT's tensors under the GPT's names: the checkpoint resumes with it "
        "unconverted");

  const LayoutRenaming renaming(from, to);
  const Renamed model = renamed_tensors(loaded.model, renaming);
  const Renamed optimizer = renamed_tensors(loaded.optimizer, renaming);
  // Everything but the decoder's description stays: step, data position, the rest of the config.
  boost::json::value state = loaded.state;
  state.as_object()["config"] = with_decoder(saved, pattern, num_layers);
  // The files' own metadata (the weight layout marker, ...) carries over; the writer adds the step.
  std::map<std::string, std::string> metadata = loaded.model.metadata();
  metadata.erase("plexus.step");
  const fs::path written =
      ck::create_checkpoint(request.destination, loaded.step, model.tensors, optimizer.tensors, state, metadata);

  ConvertResult result;
  result.destination = written;
  result.step = loaded.step;
  result.from = from_text;
  result.to = to_text;
  result.pattern = pattern;
  result.num_layers = num_layers;
  result.model_tensors = model.tensors.size();
  result.optimizer_tensors = optimizer.tensors.size();
  result.renamed = model.changed + optimizer.changed;
  return result;
}

}  // namespace plexus::cli

// Training a multi-module model (Megatron-LM's MIMO; docs/mimo.md): modality encoders (the
// mimo.modules of the run config) and the language model (its model section), each a Model of
// its own with its own parameter names (modality_submodules.<m>.encoders.<encoder>...,
// modality_submodules.<m>.input_projections.0..., language_model...), trained together on a
// multimodal dataset (data.path; plexus data digits makes one). The encoders' outputs replace
// their special tokens' embeddings in the language model's input (the splice).
//
// One process runs every module on rank 0. Under the "mimo" topology each module runs on its own
// ranks (non-colocated) or every module on every rank (colocated), with data, tensor, pipeline
// and expert parallelism inside each module; the encoders' outputs reach the language model's
// lanes over a bridge that splits or joins batches when the modules' data-parallel sizes differ
// (fan-in, fan-out).
#pragma once

#include <boost/json/value.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "plexus/core/engine/model.hpp"
#include "plexus/core/engine/trainer.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/core/run_config.hpp"

namespace plexus {

namespace distributed {
class Runtime;
}

// Whether the run config describes a MIMO model: mimo.modules is not empty.
bool is_mimo(const boost::json::value& run_config);

// Loads the plugins the encoder modules' model sections need and checks those sections as the
// model section is checked (framework keys, the stack's keys, every component's options),
// defaults filled in, errors named at mimo.modules[i].model.<key>. Call after
// load_configured_plugins and check_components. Throws config::ConfigError or PluginError.
void check_mimo_modules(PluginHost& host, boost::json::value& run_config, const PluginLoadOptions& options);

// A module of a MIMO model as its Model is built: its name ("images", "language"), its run
// config (an encoder's model section in place of "model") and the model options every layout
// shares (its parameter names' prefixes, an encoder's output head, the language model's special
// tokens). The encoders in mimo.modules' order, then the language model. For a run config that
// check_mimo_modules has checked.
struct MimoModuleModel {
  std::string name;
  boost::json::value run_config;
  ModelOptions options;
};
std::vector<MimoModuleModel> mimo_module_models(const boost::json::value& run_config);

class MimoTrainer {
 public:
  // `runtime` must outlive the trainer; nullptr: one process holding every module.
  MimoTrainer(const PluginHost& host, boost::json::value run_config, const distributed::Runtime* runtime);
  ~MimoTrainer();
  // Continues from a checkpoint directory of a MIMO run: every module's parameters and moments by
  // name (whatever layout wrote them) and the step.
  void resume_from(const std::filesystem::path& checkpoint);
  // Trains train.steps steps (from the resumed step), evaluating every train.eval_interval steps
  // and at the end, and writes a checkpoint every checkpoint.interval steps and at the end.
  TrainResult run(const TrainerEvents& events = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plexus

// A MIMO model's modules as one rank sees them: each module's run config (an encoder's model
// section in place of "model"), its parameter names' prefixes, and where its data-parallel lanes
// are in the world (from the topology's "<module>/<kind>" groups, or rank 0 for one process).
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/core/config.hpp"
#include "plexus/core/data/multimodal_dataset.hpp"
#include "plexus/core/engine/model.hpp"

namespace plexus {

namespace distributed {
class Runtime;
class Communicator;
}  // namespace distributed

inline constexpr const char* kLanguageModule = "language";

struct MimoModule {
  std::string name;  // "images", or "language"
  std::string path;  // its config: "mimo.modules[0]", or "model" for the language model
  bool encoder = false;
  std::string encoder_name;       // "clip_encoder"
  int32_t special_token = 0;      // an encoder's
  boost::json::value run_config;  // the run config as the module's Model reads it
  // Parameter names: modality_submodules.<name>.encoders.<encoder_name>. and, for the head (the
  // input projection), modality_submodules.<name>.input_projections.0.; language_model.
  std::string name_prefix, head_name_prefix;

  // This rank's part.
  bool here = false;                              // this rank runs the module
  int64_t dp_size = 1, dp_rank = 0;               // its data-parallel lanes, and this rank's
  const distributed::Communicator* dp = nullptr;  // its dp group here, when of more than one rank
  // Its tensor-parallel group here, when of more than one rank: its ranks of one lane hold the
  // same rows, each its share of the weights.
  const distributed::Communicator* tp = nullptr;
  // This rank leads its lane over the bridge (Megatron's leaders): the language model's first tp
  // rank receives the rows, broadcasts them over tp, sends their gradients back and reports the
  // lane's loss; an encoder's last tp rank sends its rows and receives their gradients, which it
  // broadcasts over tp.
  bool leader = true;
  // Per lane: its leader's world rank (at the stage that meets the bridge).
  std::vector<int32_t> lane_rank;
  // Its pipeline: the stages, this rank's, and the module's pp group here (nullptr for one stage).
  // The stages of a lane pass the stream on among themselves (Model's PipelineLink); the bridge
  // meets an encoder at its last stage, whose head is the input projection, and the language
  // model at its first, whose embedding splices the rows in (Megatron's BridgeCommunicator).
  int64_t stages = 1, stage = 0;
  const distributed::Communicator* pp = nullptr;
  // By stage: the world rank holding that stage of lane 0 at the leader's tp position (it sends
  // the stage's tensors to the checkpoint's writer).
  std::vector<int32_t> stage_rank;
  // Its ep group here, when of more than one rank: its MoE layers' experts are divided over it.
  const distributed::Communicator* ep = nullptr;

  bool first_stage() const noexcept { return stage == 0; }
  bool last_stage() const noexcept { return stage + 1 == stages; }
};

// The encoders of mimo.modules, in order, then the language model; this rank's part of each from
// the topology (every module on rank 0 without a runtime or with one rank). Throws
// config::ConfigError naming the key: modules the topology does not lay out (or lays out and the
// config does not name), a module with context parallelism (not built for MIMO modules yet),
// colocated modules with more than one pipeline stage, several ranks without the mimo
// topology.
std::vector<MimoModule> mimo_modules(const boost::json::value& run_config,
                                     const distributed::Runtime* runtime);

// A ConfigError of a module's own run config named where the user wrote the key: an encoder's
// "model..." paths are `module_path`.model... ("mimo.modules[0].model.num_layers"); the
// language model's ("model") are as they are.
config::ConfigError at_module(const config::ConfigError& e, const std::string& module_path);

// The model options of module `m` every layout shares: its names' prefixes, an encoder's output
// head, and for the language model the encoders' special tokens (`modules`' order).
ModelOptions module_model_options(const std::vector<MimoModule>& modules, std::size_t m);

// The run config of encoder module `index` of mimo.modules: the run config with its model section
// in place of "model" (the checks of check_mimo_modules fill its defaults).
boost::json::value encoder_run_config(const boost::json::value& run_config, std::size_t index);

}  // namespace plexus

// The order in which one rank runs a MIMO step's microbatches through the modules it holds
// (Megatron's multi-module schedule). The modules form one pipeline: an encoder's stages, then the
// language model's, joined by the bridge (the encoders' last stages feed the language model's
// first). A rank that holds one module's stage (non-colocated) runs 1F1B at its place in that
// pipeline: warm-up forwards as many as the stages after it, then one forward and one backward in
// turn, then the remaining backwards. A rank that holds every module (colocated, each of one
// stage, or one process) runs each microbatch through the encoders, the language model and back.
// Evaluation runs the forwards in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/mimo/mimo_modules.hpp"

namespace plexus {

struct MimoOp {
  enum class Kind : uint8_t { forward, backward };
  Kind kind = Kind::forward;
  std::size_t module = 0;  // its index in the modules (the encoders, then the language model)
  uint32_t microbatch = 0;
  bool operator==(const MimoOp&) const = default;
};

// This rank's calls of one step of `microbatches` (forward only unless `training`).
std::vector<MimoOp> mimo_schedule(const std::vector<MimoModule>& modules, uint32_t microbatches,
                                  bool training);

// The stages of the modules' pipeline, and a module's stage's place in it: an encoder's stages end
// where the language model's begin (a shallower encoder starts later).
int64_t mimo_pipeline_stages(const std::vector<MimoModule>& modules);
int64_t mimo_pipeline_place(const std::vector<MimoModule>& modules, std::size_t module, int64_t stage);

}  // namespace plexus

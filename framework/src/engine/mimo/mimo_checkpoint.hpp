// Checkpoints of a MIMO model: one directory (checkpoint_dir.hpp) holding every module's
// parameters under their Megatron names (modality_submodules.<m>..., language_model...) and their
// AdamW moments (<name>.exp_avg, <name>.exp_avg_sq), whichever ranks hold them; world rank 0
// writes it, each stage of each module's first data-parallel lane sending it that stage's
// tensors (a tied copy once, from the stage that owns it: `stages`, by module). The names do not
// depend on the layout, so a run resumes on another one (colocated <-> non-colocated, other
// data-parallel sizes): each rank reads its modules' tensors by name.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <vector>

#include <boost/json/value.hpp>

#include "engine/mimo/mimo_modules.hpp"
#include "engine/pipeline_stages.hpp"

namespace plexus {

class Model;
class ParameterUpdate;
namespace distributed {
class Runtime;
}

// Collective over the world. Returns the directory on world rank 0 (empty elsewhere).
std::filesystem::path save_mimo_checkpoint(const std::filesystem::path& root, int64_t step,
                                           const std::vector<MimoModule>& modules,
                                           const std::vector<std::unique_ptr<Model>>& models,
                                           const std::vector<std::unique_ptr<ParameterUpdate>>& updates,
                                           const std::deque<PipelineStages>& stages,
                                           const distributed::Runtime* runtime,
                                           const boost::json::value& state);

// Loads the modules held here from checkpoint `dir`; returns its step. Throws
// CheckpointError naming the directory and every tensor missing or of another shape.
int64_t load_mimo_checkpoint(const std::filesystem::path& dir, const std::vector<MimoModule>& modules,
                             const std::vector<std::unique_ptr<Model>>& models,
                             const std::vector<std::unique_ptr<ParameterUpdate>>& updates);

}  // namespace plexus

// How the decoder is cut into pipeline stages (docs/architecture.md, "Placement";
// docs/distributed.md): every chunk of the model with its layers, and the chunks each pipeline
// rank builds. Chunk k = v * pp + r is pipeline rank r's virtual stage v (Megatron-LM's order):
// rank 0 holds chunks 0, pp, 2 pp, ...; the embedding is in chunk 0, the final norm and head in
// the last chunk. A pattern's '|' segments are the chunks; without them the logical layers are
// split as Megatron splits them (an even split, uneven first and last stages, or the embedding
// and loss counted as layers).
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <vector>

#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/engine/model.hpp"

namespace plexus {

// The distributed.pipeline section of a run config.
struct PipelineSettings {
  uint32_t virtual_stages = 0;  // chunks per rank; 0: the pattern's segments / pp, or 1
  uint32_t first_stage_layers = 0, last_stage_layers = 0;  // 0: an even split
  bool account_for_embedding = false, account_for_loss = false;

  static PipelineSettings from_run_config(const boost::json::value& run_config);
};

struct PipelineLayout {
  uint32_t pipeline_size = 1;
  uint32_t virtual_stages = 1;
  std::vector<ChunkSpec> chunks;  // every chunk of the model, chunk k at index k

  // The chunks pipeline rank `rank` builds, in forward order (its virtual stages 0, 1, ...).
  ModelPlacement placement_of(uint32_t rank) const;
  // The pipeline rank and virtual stage holding logical decoder layer `layer`.
  struct Stage {
    uint32_t rank = 0, virtual_stage = 0;
  };
  Stage stage_of(uint32_t layer) const;
};

// The layout of the decoder `plan` over `pipeline_size` ranks. Throws config::ConfigError naming
// the key and the numbers when the layers do not fit (a misfit of the split, segments that pp
// does not divide, options that contradict each other, a chunk left without a layer).
PipelineLayout pipeline_layout(const DecoderPlan& plan, const PipelineSettings& settings,
                               uint32_t pipeline_size);

}  // namespace plexus

#include "plexus/core/engine/pipeline_layout.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <string>

#include "plexus/core/config.hpp"

namespace plexus {
namespace {

const std::string kSection = "distributed.pipeline";

std::string n(uint32_t value) {
  return std::to_string(value);
}

// The chunks of a pattern's '|' segments: segment k is chunk k.
std::vector<ChunkSpec> segment_chunks(const DecoderPlan& plan) {
  std::vector<ChunkSpec> chunks(plan.num_segments);
  std::vector<bool> seen(plan.num_segments, false);
  for (const DecoderLayerPlan& layer : plan.layers) {
    if (layer.mtp_depth != 0) continue;
    ChunkSpec& chunk = chunks.at(layer.segment);
    if (!seen[layer.segment]) chunk.first_layer = layer.logical;
    seen[layer.segment] = true;
    chunk.end_layer = layer.logical + 1;
  }
  uint32_t next = 0;
  for (ChunkSpec& chunk : chunks) {  // an empty segment holds no layer where the previous ended
    if (chunk.end_layer == 0 && chunk.first_layer == 0) chunk.first_layer = chunk.end_layer = next;
    next = chunk.end_layer;
  }
  return chunks;
}

// Megatron's split of L logical layers over P stages of V chunks each: the layers of each stage
// (uneven first and last stages, or the embedding and loss counted as layers), divided evenly
// over its chunks; chunk k = v * P + r takes the next ones in forward order.
std::vector<ChunkSpec> split_chunks(uint32_t layers, const PipelineSettings& s, uint32_t p, uint32_t v) {
  const bool uneven = s.first_stage_layers > 0 || s.last_stage_layers > 0;
  if (uneven && (s.account_for_embedding || s.account_for_loss))
    throw config::ConfigError(kSection,
                              "first_stage_layers / last_stage_layers and account_for_embedding / "
                              "account_for_loss do not go together (as in Megatron-LM): choose one way to "
                              "balance the stages");
  std::vector<uint32_t> stage_layers(p, 0);
  if (uneven) {
    uint32_t rest = layers, stages_left = p;
    for (const uint32_t given : {s.first_stage_layers, s.last_stage_layers}) {
      if (given == 0) continue;
      if (given > rest)
        throw config::ConfigError(kSection, "first_stage_layers " + n(s.first_stage_layers) +
                                                " and last_stage_layers " + n(s.last_stage_layers) +
                                                " ask for more than the decoder's " + n(layers) +
                                                " logical layers");
      rest -= given;
      --stages_left;
    }
    if (stages_left > 0 && rest % stages_left != 0)
      throw config::ConfigError(kSection, "the " + n(rest) + " logical layers left for the " +
                                              n(stages_left) + " middle stages (" + n(layers) +
                                              " minus first_stage_layers " + n(s.first_stage_layers) +
                                              " and last_stage_layers " + n(s.last_stage_layers) +
                                              ") do not divide evenly among them");
    const uint32_t middle = stages_left > 0 ? rest / stages_left : 0;
    std::fill(stage_layers.begin(), stage_layers.end(), middle);
    if (s.first_stage_layers > 0) stage_layers.front() = s.first_stage_layers;
    if (s.last_stage_layers > 0) stage_layers.back() = s.last_stage_layers;
  } else {
    const uint32_t counted = layers + (s.account_for_embedding ? 1 : 0) + (s.account_for_loss ? 1 : 0);
    if (counted % p != 0)
      throw config::ConfigError(
          "distributed.topology.options",
          "pp = " + n(p) + " does not divide the decoder's " + n(layers) + " logical layers" +
              (counted != layers ? " (" + n(counted) + " with the embedding or loss counted)"
                                 : std::string()) +
              ": choose a pp that divides them, or size the first and last stages "
              "(distributed.pipeline.first_stage_layers, last_stage_layers)");
    std::fill(stage_layers.begin(), stage_layers.end(), counted / p);
  }
  for (uint32_t r = 0; r < p; ++r)
    if (stage_layers[r] % v != 0)
      throw config::ConfigError(kSection + ".virtual_stages", n(v) + " virtual stages do not divide the " +
                                                                  n(stage_layers[r]) +
                                                                  " layers of pipeline stage " + n(r) +
                                                                  " (every chunk of a stage holds as many)");
  std::vector<ChunkSpec> chunks(static_cast<std::size_t>(p) * v);
  uint32_t next = 0;
  for (uint32_t k = 0; k < chunks.size(); ++k) {
    const uint32_t r = k % p, vs = k / p;
    int64_t size = stage_layers[r] / v;
    if (s.account_for_embedding && k == 0) --size;  // the embedding stands for a layer here
    if (s.account_for_loss && k + 1 == chunks.size()) --size;
    if (size < 0)
      throw config::ConfigError(kSection,
                                "chunk " + n(k) + " (pipeline stage " + n(r) + ", virtual stage " + n(vs) +
                                    ") has no layer left once the embedding or loss is counted as one");
    chunks[k].first_layer = next;
    next += static_cast<uint32_t>(size);
    chunks[k].end_layer = next;
  }
  return chunks;
}

}  // namespace

PipelineSettings PipelineSettings::from_run_config(const boost::json::value& run_config) {
  PipelineSettings s;
  const auto* distributed = run_config.as_object().if_contains("distributed");
  const auto* section = distributed != nullptr ? distributed->as_object().if_contains("pipeline") : nullptr;
  if (section == nullptr || !section->is_object()) return s;
  const auto& o = section->as_object();
  const auto number = [&](const char* key) {
    const auto* v = o.if_contains(key);
    return v != nullptr && v->is_number() ? v->to_number<uint32_t>() : 0u;
  };
  const auto flag = [&](const char* key) {
    const auto* v = o.if_contains(key);
    return v != nullptr && v->is_bool() && v->as_bool();
  };
  s.virtual_stages = number("virtual_stages");
  s.first_stage_layers = number("first_stage_layers");
  s.last_stage_layers = number("last_stage_layers");
  s.account_for_embedding = flag("account_for_embedding");
  s.account_for_loss = flag("account_for_loss");
  return s;
}

PipelineLayout pipeline_layout(const DecoderPlan& plan, const PipelineSettings& settings,
                               uint32_t pipeline_size) {
  if (pipeline_size < 1) throw config::ConfigError("distributed.topology.options", "pp must be at least 1");
  PipelineLayout layout;
  layout.pipeline_size = pipeline_size;
  const bool segmented = plan.num_segments > 1;
  // One stage holds every segment and every layer, whatever the split options say: the same config
  // runs at every pp.
  if (pipeline_size == 1) {
    layout.chunks.push_back(ModelPlacement::whole(plan).chunks.front());
    return layout;
  }
  if (segmented) {
    if (settings.first_stage_layers > 0 || settings.last_stage_layers > 0 || settings.account_for_embedding ||
        settings.account_for_loss)
      throw config::ConfigError(kSection,
                                "the pattern's '|' segments place the layers (" + plan.summary +
                                    "): first_stage_layers, last_stage_layers and account_for_embedding / "
                                    "account_for_loss apply to an even split only");
    if (plan.num_segments % pipeline_size != 0)
      throw config::ConfigError("distributed.topology.options",
                                "pp = " + n(pipeline_size) + " does not divide the " + n(plan.num_segments) +
                                    " segments of " + plan.summary +
                                    " ('|'): segment v * pp + r goes to pipeline "
                                    "rank r, virtual stage v, so their number must be a multiple of pp");
    const uint32_t implied = plan.num_segments / pipeline_size;
    if (settings.virtual_stages != 0 && settings.virtual_stages != implied)
      throw config::ConfigError(kSection + ".virtual_stages",
                                n(settings.virtual_stages) + " virtual stages, but " + plan.summary +
                                    " has " + n(plan.num_segments) + " segments, " + n(implied) +
                                    " per pipeline rank at pp = " + n(pipeline_size) + ": set it to " +
                                    n(implied) + " or 0");
    layout.virtual_stages = implied;
    layout.chunks = segment_chunks(plan);
  } else {
    layout.virtual_stages = settings.virtual_stages == 0 ? 1 : settings.virtual_stages;
    layout.chunks = split_chunks(plan.num_logical, settings, pipeline_size, layout.virtual_stages);
  }
  for (uint32_t k = 0; k < layout.chunks.size(); ++k) {
    ChunkSpec& chunk = layout.chunks[k];
    chunk.index = k;
    chunk.embedding = k == 0;
    chunk.output_layers = k + 1 == layout.chunks.size();
    if (chunk.first_layer == chunk.end_layer && !chunk.embedding && !chunk.output_layers)
      throw config::ConfigError(segmented ? "model" : kSection,
                                "chunk " + n(k) + " (pipeline stage " + n(k % pipeline_size) +
                                    ", virtual stage " + n(k / pipeline_size) +
                                    ") would hold no layer of the decoder's " + n(plan.num_logical) +
                                    " logical layers at pp = " + n(pipeline_size) + " with " +
                                    n(layout.virtual_stages) + " virtual stage(s)");
  }
  return layout;
}

ModelPlacement PipelineLayout::placement_of(uint32_t rank) const {
  ModelPlacement placement;
  for (const ChunkSpec& chunk : chunks)
    if (chunk.index % pipeline_size == rank) placement.chunks.push_back(chunk);
  return placement;
}

PipelineLayout::Stage PipelineLayout::stage_of(uint32_t layer) const {
  for (const ChunkSpec& chunk : chunks)
    if (layer >= chunk.first_layer && layer < chunk.end_layer)
      return {chunk.index % pipeline_size, chunk.index / pipeline_size};
  return {};
}

}  // namespace plexus

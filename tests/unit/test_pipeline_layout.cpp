// How the decoder is cut into pipeline stages (plexus/core/engine/pipeline_layout.hpp): Megatron-LM's
// even split, its uneven first and last stages, the embedding and loss counted as layers, virtual
// stages in Megatron's chunk order (chunk k = v * pp + r), a pattern's '|' segments, and every
// misfit refused naming the key and the numbers.
#define BOOST_TEST_MODULE pipeline_layout
#include <boost/test/unit_test.hpp>

#include <string>
#include <utility>
#include <vector>

#include "plexus/core/config.hpp"
#include "plexus/core/engine/pipeline_layout.hpp"

namespace {

using plexus::DecoderLayerPlan;
using plexus::DecoderPlan;
using plexus::PipelineSettings;

// A decoder of `layers` logical layers (one physical layer each), in `segments` equal segments.
DecoderPlan decoder(uint32_t layers, uint32_t segments = 1) {
  DecoderPlan plan;
  plan.summary = "a test decoder";
  plan.num_logical = layers;
  plan.num_segments = segments;
  for (uint32_t i = 0; i < layers; ++i) {
    DecoderLayerPlan layer;
    layer.physical = layer.logical = i;
    layer.segment = i * segments / layers;
    plan.layers.push_back(layer);
  }
  return plan;
}

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges ranges(const plexus::PipelineLayout& layout) {
  Ranges out;
  for (const plexus::ChunkSpec& c : layout.chunks) out.emplace_back(c.first_layer, c.end_layer);
  return out;
}

Ranges ranges(const plexus::ModelPlacement& placement) {
  Ranges out;
  for (const plexus::ChunkSpec& c : placement.chunks) out.emplace_back(c.first_layer, c.end_layer);
  return out;
}

std::string refusal(const DecoderPlan& plan, const PipelineSettings& s, uint32_t pp) {
  try {
    (void)plexus::pipeline_layout(plan, s, pp);
  } catch (const plexus::config::ConfigError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(megatrons_interleaved_example_eight_layers_two_stages_two_virtual_stages) {
  PipelineSettings s;
  s.virtual_stages = 2;
  const plexus::PipelineLayout layout = plexus::pipeline_layout(decoder(8), s, 2);
  BOOST_TEST(layout.virtual_stages == 2u);
  // Megatron's comment in get_num_layers_to_build: stage 0 [0, 1] [4, 5], stage 1 [2, 3] [6, 7].
  BOOST_TEST((ranges(layout.placement_of(0)) == Ranges{{0, 2}, {4, 6}}));
  BOOST_TEST((ranges(layout.placement_of(1)) == Ranges{{2, 4}, {6, 8}}));
  BOOST_TEST(layout.placement_of(0).chunks[0].embedding);
  BOOST_TEST(!layout.placement_of(0).chunks[1].embedding);
  BOOST_TEST(layout.placement_of(1).chunks[1].output_layers);
  BOOST_TEST(layout.placement_of(1).chunks[1].index == 3u);
  BOOST_TEST(layout.stage_of(5).rank == 0u);
  BOOST_TEST(layout.stage_of(5).virtual_stage == 1u);
  // Four virtual stages of one layer each: stage 0 [0] [2] [4] [6].
  s.virtual_stages = 4;
  BOOST_TEST((ranges(plexus::pipeline_layout(decoder(8), s, 2).placement_of(0)) ==
              Ranges{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

BOOST_AUTO_TEST_CASE(an_even_split_and_the_single_stage) {
  const PipelineSettings s;
  BOOST_TEST((ranges(plexus::pipeline_layout(decoder(8), s, 4)) == Ranges{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  const plexus::PipelineLayout one =
      plexus::pipeline_layout(decoder(7, 7), s, 1);  // segments ignored at pp = 1
  PipelineSettings split;
  split.first_stage_layers = 2;
  split.virtual_stages = 3;
  BOOST_TEST((ranges(plexus::pipeline_layout(decoder(7), split, 1)) == Ranges{{0, 7}}));  // and so are these
  BOOST_TEST((ranges(one) == Ranges{{0, 7}}));
  BOOST_TEST((one.chunks[0].embedding && one.chunks[0].output_layers));
}

BOOST_AUTO_TEST_CASE(the_embedding_and_the_loss_counted_as_layers) {
  PipelineSettings s;
  s.account_for_embedding = s.account_for_loss = true;
  // 6 layers + 2 = 8 over 4 stages: 2 each, one of them the embedding (first) or the loss (last).
  BOOST_TEST((ranges(plexus::pipeline_layout(decoder(6), s, 4)) == Ranges{{0, 1}, {1, 3}, {3, 5}, {5, 6}}));
  s.account_for_loss = false;  // 7 over ... : refused, the numbers named
  const std::string e = refusal(decoder(6), s, 4);
  BOOST_TEST((has(e, "distributed.topology.options") && has(e, "pp = 4") && has(e, "6 logical layers") &&
              has(e, "7 with the embedding or loss counted")),
             e);
}

BOOST_AUTO_TEST_CASE(uneven_first_and_last_stages) {
  PipelineSettings s;
  s.first_stage_layers = 1;
  s.last_stage_layers = 3;
  BOOST_TEST((ranges(plexus::pipeline_layout(decoder(10), s, 4)) == Ranges{{0, 1}, {1, 4}, {4, 7}, {7, 10}}));
  // With two virtual stages the first and last stages' layers are divided over their chunks too.
  s.first_stage_layers = 2;
  s.last_stage_layers = 2;
  s.virtual_stages = 2;
  BOOST_TEST((ranges(plexus::pipeline_layout(decoder(12), s, 3)) ==
              Ranges{{0, 1}, {1, 5}, {5, 6}, {6, 7}, {7, 11}, {11, 12}}));
}

BOOST_AUTO_TEST_CASE(a_pattern_places_its_segments) {
  const DecoderPlan plan = decoder(8, 4);  // segments of two layers each
  const PipelineSettings s;
  const plexus::PipelineLayout layout = plexus::pipeline_layout(plan, s, 2);
  BOOST_TEST(layout.virtual_stages == 2u);
  BOOST_TEST((ranges(layout.placement_of(0)) == Ranges{{0, 2}, {4, 6}}));  // segments 0 and 2
  BOOST_TEST((ranges(layout.placement_of(1)) == Ranges{{2, 4}, {6, 8}}));  // segments 1 and 3
  BOOST_TEST(plexus::pipeline_layout(plan, s, 4).virtual_stages == 1u);
}

BOOST_AUTO_TEST_CASE(every_misfit_is_refused_naming_the_numbers) {
  PipelineSettings s;
  std::string e = refusal(decoder(6), s, 4);
  BOOST_TEST((has(e, "pp = 4 does not divide the decoder's 6 logical layers")), e);
  s.virtual_stages = 3;
  e = refusal(decoder(8), s, 2);
  BOOST_TEST((has(e, "distributed.pipeline.virtual_stages") &&
              has(e, "3 virtual stages do not divide the 4 layers")),
             e);
  s = {};
  s.first_stage_layers = 1;
  s.last_stage_layers = 1;
  e = refusal(decoder(2), s, 3);  // the middle stage would be empty
  BOOST_TEST((has(e, "chunk 1") && has(e, "would hold no layer")), e);
  e = refusal(decoder(9), s, 4);  // 7 left for 2 middle stages
  BOOST_TEST((has(e, "the 7 logical layers left for the 2 middle stages")), e);
  s.account_for_embedding = true;
  e = refusal(decoder(9), s, 4);
  BOOST_TEST(has(e, "do not go together"), e);
  e = refusal(decoder(8, 4), PipelineSettings{}, 3);
  BOOST_TEST((has(e, "pp = 3 does not divide the 4 segments of a test decoder")), e);
  PipelineSettings v;
  v.virtual_stages = 1;
  e = refusal(decoder(8, 4), v, 2);
  BOOST_TEST((has(e, "1 virtual stages, but a test decoder has 4 segments, 2 per pipeline rank")), e);
  v = {};
  v.account_for_loss = true;
  e = refusal(decoder(8, 4), v, 2);
  BOOST_TEST((has(e, "segments place the layers")), e);
}

// A rank's model is the chunks it owns (docs/architecture.md, "The engine"): the same model cut
// into chunks, driven microbatch by microbatch through the chunk interface a pipeline schedule
// uses, computes what the whole model computes through the scheduler.
//  - One model object holding two chunks (virtual pipeline stages on one rank) shares one
//    parameter store: loss and every gradient are bit-identical to the whole model's.
//  - Two model objects, each holding one chunk (two pipeline ranks), each build and initialize
//    only their own layers' parameters, to the same values as the whole model; with untied
//    embeddings every gradient is bit-identical; with tied embeddings the last chunk holds its own
//    copy of the embedding matrix (Megatron's rule), and the two copies' gradients sum to the
//    whole model's within float32 rounding (the additions come in another order).
// For the plain residual, mHC (the boundary carries the n streams) and a hybrid pattern with a
// group, over three microbatches. Plus the refusals of a chunk driven out of order.
#define BOOST_TEST_MODULE model_chunks
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "plexus/core/engine/model.hpp"
#include "plexus/core/run_config.hpp"

namespace {

const std::filesystem::path kPlugins = std::filesystem::path(PLEXUS_BUILD_DIR) / "lib/plexus/plugins";

struct Setup {
  boost::json::value run_config;
  plexus::PluginHost host;
  explicit Setup(std::vector<std::string> overrides) {
    std::vector<std::string> all = {"model.vocab_size=50",      "model.hidden_size=32",
                                    "model.num_layers=4",       "model.num_attention_heads=4",
                                    "model.ffn_hidden_size=40", "model.seq_length=16"};
    all.insert(all.end(), overrides.begin(), overrides.end());
    run_config = plexus::load_run_config(std::nullopt, all);
    plexus::load_configured_plugins(host, run_config, {{kPlugins}, false});
    plexus::check_components(host, run_config);
  }
};

std::vector<plexus::Batch> batches(int64_t seq) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int32_t> token(0, 49);
  std::vector<plexus::Batch> out;
  for (int mb = 0; mb < 3; ++mb) {
    plexus::Batch b{plexus::Tensor({2, seq}, plx_dtype_i32()), plexus::Tensor({2, seq}, plx_dtype_i32())};
    for (int64_t i = 0; i < 2 * seq; ++i) {
      b.tokens.data<int32_t>()[i] = token(gen);
      b.targets.data<int32_t>()[i] = token(gen);
    }
    out.push_back(std::move(b));
  }
  return out;
}

// Every parameter's gradient by name.
using Grads = std::map<std::string, std::vector<float>>;
Grads grads_of(const plexus::Model& model) {
  Grads out;
  const plexus::ParameterStore& params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const plexus::Tensor& g = params[i].grad;
    const float* data = g.data<float>();
    out[params[i].name] = g.empty() ? std::vector<float>{} : std::vector<float>(data, data + g.numel());
  }
  return out;
}

struct Result {
  double loss = 0;
  Grads grads;
};

Result whole_model(Setup& s, const std::vector<plexus::Batch>& mbs) {
  plexus::Model model(s.host, s.run_config);
  model.initialize(7);
  BOOST_TEST(model.num_chunks() == 1u);
  const plexus::SchedulerInstance sequential(s.host.get(PLX_KIND_SCHEDULER, "sequential"), nullptr);
  Result r;
  r.loss = model.forward_backward(sequential, mbs);
  r.grads = grads_of(model);
  return r;
}

plexus::ModelPlacement split_at(uint32_t layer, uint32_t layers) {
  return plexus::ModelPlacement{
      {plexus::ChunkSpec{0, layer, true, false}, plexus::ChunkSpec{layer, layers, false, true}}};
}

// Microbatch by microbatch as a pipeline of two stages would: forward of the first chunk, its
// stream into the second, the second's backward, its gradient back into the first.
double drive(plexus::Model& first, uint32_t first_chunk, plexus::Model& second, uint32_t second_chunk,
             const std::vector<plexus::Batch>& mbs) {
  first.start_microbatches(mbs, true);
  if (&second != &first) second.start_microbatches(mbs, true);
  for (uint32_t mb = 0; mb < mbs.size(); ++mb) {
    first.forward_chunk(first_chunk, mb);
    second.set_chunk_input(second_chunk, mb, first.take_chunk_output(first_chunk, mb));
    second.forward_chunk(second_chunk, mb);
    second.backward_chunk(second_chunk, mb);
    first.set_chunk_output_grad(first_chunk, mb, second.take_chunk_input_grad(second_chunk, mb));
    first.backward_chunk(first_chunk, mb);
  }
  const double loss = second.finish_microbatches();
  if (&second != &first) BOOST_TEST(first.finish_microbatches() == 0.0);  // no head: no loss
  return loss;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void one_object_two_chunks(const std::vector<std::string>& overrides, uint32_t logical_layers = 4) {
  Setup s(overrides);
  const auto mbs = batches(16);
  const Result whole = whole_model(s, mbs);
  plexus::Model model(s.host, s.run_config, plexus::ModelOptions{split_at(2, logical_layers), false});
  model.initialize(7);
  BOOST_TEST(model.num_chunks() == 2u);
  model.parameters().zero_grads();
  const double loss = drive(model, 0, model, 1, mbs);
  BOOST_TEST(std::memcmp(&loss, &whole.loss, sizeof(double)) == 0, "loss " << loss << " vs " << whole.loss);
  const Grads grads = grads_of(model);
  BOOST_TEST(grads.size() == whole.grads.size());
  for (const auto& [name, g] : whole.grads) {
    BOOST_TEST_REQUIRE(grads.count(name) == 1u, name);
    BOOST_TEST(same_bits(grads.at(name), g), "gradient of " << name << " bit-identical");
  }
}

void two_objects(const std::vector<std::string>& overrides, bool tied) {
  Setup s(overrides);
  const auto mbs = batches(16);
  const Result whole = whole_model(s, mbs);
  plexus::Model first(s.host, s.run_config,
                      plexus::ModelOptions{{{plexus::ChunkSpec{0, 2, true, false}}}, false});
  plexus::Model second(s.host, s.run_config,
                       plexus::ModelOptions{{{plexus::ChunkSpec{2, 4, false, true}}}, false});
  first.initialize(7);
  second.initialize(7);
  first.parameters().zero_grads();
  second.parameters().zero_grads();
  // Each holds only its own layers' parameters.
  for (std::size_t i = 0; i < first.parameters().size(); ++i) {
    const std::string& name = first.parameters()[i].name;
    BOOST_TEST((name.find("decoder.layers.2.") == std::string::npos &&
                name.find("final") == std::string::npos && name.find("output_layer") == std::string::npos),
               "the first chunk holds " << name);
  }
  for (std::size_t i = 0; i < second.parameters().size(); ++i) {
    const std::string& name = second.parameters()[i].name;
    BOOST_TEST(name.find("decoder.layers.0.") == std::string::npos, "the second chunk holds " << name);
    BOOST_TEST(name.find("decoder.layers.1.") == std::string::npos, "the second chunk holds " << name);
  }
  const double loss = drive(first, 0, second, 0, mbs);
  BOOST_TEST(std::memcmp(&loss, &whole.loss, sizeof(double)) == 0, "loss " << loss << " vs " << whole.loss);
  const Grads a = grads_of(first), b = grads_of(second);
  const std::string shared = "embedding.word_embeddings.weight";
  BOOST_TEST((b.count(shared) == 1u) == tied, "the last chunk holds a copy of the tied embedding: " << tied);
  for (const auto& [name, g] : whole.grads) {
    const bool in_a = a.count(name) == 1, in_b = b.count(name) == 1;
    BOOST_TEST_REQUIRE((in_a || in_b), name << " is held by a chunk");
    if (in_a && in_b) {
      // The tied embedding: each copy's gradient is its chunk's part; they sum to the whole one.
      const std::vector<float>& x = a.at(name);
      const std::vector<float>& y = b.at(name);
      double worst = 0, largest = 0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(x[i]) + y[i] - g[i]));
        largest = std::max(largest, std::abs(static_cast<double>(g[i])));
      }
      // float32 additions of the same terms in another order: within a few units of rounding.
      BOOST_TEST(worst <= 4 * 6e-8 * largest,
                 name << ": the copies' gradients sum to the whole's within " << worst);
      continue;
    }
    BOOST_TEST(same_bits(in_a ? a.at(name) : b.at(name), g), "gradient of " << name << " bit-identical");
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_model_object_holding_two_chunks_computes_the_whole_models_gradients_bit_for_bit) {
  one_object_two_chunks({});
}

BOOST_AUTO_TEST_CASE(the_chunk_boundary_carries_the_mhc_streams) {
  one_object_two_chunks({R"(plugins.load=["sequential_scheduler","transformer","mhc_native"])",
                         "mhc.enabled=true", "mhc.backend=mhc_native", "mhc.num_residual_streams=2"});
}

BOOST_AUTO_TEST_CASE(a_hybrid_pattern_splits_at_a_logical_layer_and_never_inside_a_group) {
  // "[*-]" is one logical layer: the four physical layers are logical layers 0 ("[*-]"), 1 ("M"), 2 ("-").
  one_object_two_chunks(
      {R"(model.pattern="[*-]M-")", R"(plugins.load=["sequential_scheduler","transformer","mamba"])",
       "model.mamba.options.mamba_state_dim=16", "model.mamba.options.mamba_head_dim=16",
       "model.mamba.options.mamba_num_groups=1", "model.mamba.options.chunk_size=8"},
      3);
}

BOOST_AUTO_TEST_CASE(two_model_objects_as_two_pipeline_ranks_with_untied_embeddings_match_bit_for_bit) {
  two_objects({"model.untie_embeddings_and_output_weights=true"}, false);
}

BOOST_AUTO_TEST_CASE(
    two_model_objects_with_tied_embeddings_each_hold_a_copy_whose_gradients_sum_to_the_whole) {
  two_objects({}, true);
}

BOOST_AUTO_TEST_CASE(a_chunk_driven_out_of_order_is_refused_naming_what_is_missing) {
  Setup s({});
  const auto mbs = batches(16);
  plexus::Model model(s.host, s.run_config, plexus::ModelOptions{split_at(2, 4), false});
  model.initialize(7);
  model.start_microbatches(mbs, true);
  const auto refused = [](const std::function<void()>& call, const std::string& words) {
    try {
      call();
    } catch (const std::exception& e) {
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
      return;
    }
    BOOST_ERROR("not refused: " << words);
  };
  refused([&] { model.forward_chunk(1, 0); }, "set_chunk_input");
  refused([&] { model.take_chunk_output(0, 0); }, "before its forward completed");
  refused([&] { model.set_chunk_input(0, 0, plexus::Tensor()); }, "starts with the embedding");
  model.forward_chunk(0, 0);
  refused([&] { model.backward_chunk(0, 0); }, "set_chunk_output_grad");
  refused([&] { model.forward_chunk(2, 0); }, "no microbatch 0 of chunk 2");
  const plexus::SchedulerInstance sequential(s.host.get(PLX_KIND_SCHEDULER, "sequential"), nullptr);
  refused([&] { model.forward_backward(sequential, mbs); }, "2 chunk(s)");
  refused([&] { model.evaluate(mbs[0]); }, "one chunk holding the whole model");
}

BOOST_AUTO_TEST_CASE(a_placement_that_is_not_a_model_cut_is_refused) {
  Setup s({});
  const auto refused = [&](plexus::ModelPlacement placement, const std::string& words) {
    try {
      plexus::Model model(s.host, s.run_config, plexus::ModelOptions{std::move(placement), false});
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
      return;
    }
    BOOST_ERROR("not refused: " << words);
  };
  refused({{plexus::ChunkSpec{1, 4, true, true}}}, "the embedding comes only before decoder layer 0");
  refused({{plexus::ChunkSpec{0, 3, true, true}}}, "only after the last decoder layer");
  refused({{plexus::ChunkSpec{0, 2, true, false}, plexus::ChunkSpec{1, 4, false, true}}}, "overlaps");
  refused({{plexus::ChunkSpec{0, 5, true, true}}}, "not a range of the decoder's 4 logical layers");
  refused({{plexus::ChunkSpec{2, 2, false, false}}}, "holds nothing");
}

// MoE layers in models, as a user runs them (plexus-train, plexus model show, real plugin
// files): the GPT with every model.moe.layer_freq-th MLP an MoE (Megatron's moe_layer_freq) and a
// hybrid pattern with E train, the loss falls, a run resumes bit-exactly from its checkpoint, the
// checkpoint names the experts as Megatron does, and metrics.jsonl carries the layer's auxiliary
// losses and tokens per expert; bad options stop the run naming the option.
#define BOOST_TEST_MODULE moe_training
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_process.hpp"
#include "train_corpus.hpp"

using plexus::test::kBin;
using plexus::test::quote;
using plexus::test::run_process;
using plexus::test::step_losses;
using Corpus = plexus::test::TrainCorpus;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string file_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// 4 experts of width 32, top-2, both auxiliary losses on.
const std::string kMoe =
    " --set model.moe.options.num_moe_experts=4 --set model.moe.options.moe_router_topk=2"
    " --set model.moe.options.moe_ffn_hidden_size=32 --set model.moe.options.moe_aux_loss_coeff=0.01"
    " --set model.moe.options.moe_z_loss_coeff=0.001";
// The corpus's 2-layer GPT with layer 0's MLP an MoE.
const std::string kMoeGpt = " --set model.moe.layer_freq=2" + kMoe;

}  // namespace

BOOST_AUTO_TEST_CASE(a_gpt_with_moe_layers_trains_and_resumes_bit_exactly) {
  Corpus corpus;
  const auto straight = corpus.dir.path() / "straight";
  const auto a = run_process(corpus.train(straight.string(), kMoeGpt + " --set checkpoint.interval=10"));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  const std::vector<double> expected = step_losses(straight / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == 20u);
  // 20 steps, all within the default config's learning-rate warmup, take the loss from 5.54 to
  // 5.23 here.
  BOOST_TEST(expected.back() < expected.front() - 0.2, "loss " << expected.front() << " -> " << expected.back());

  // The layer's reports in every step record: the auxiliary losses, the mean over the step's 2
  // microbatches, and the tokens per expert of the whole step: 2 microbatches of 4 x 32 tokens
  // with k = 2.
  for (const boost::json::object& record : plexus::test::records(straight / "metrics.jsonl", "step")) {
    BOOST_TEST(record.at("moe/layer0.aux_loss").as_double() > 0.0);
    BOOST_TEST(record.at("moe/layer0.z_loss").as_double() > 0.0);
    double tokens = 0;
    for (int e = 0; e < 4; ++e) tokens += record.at("moe/layer0.tokens_per_expert." + std::to_string(e)).as_double();
    BOOST_TEST(tokens == 2 * 4 * 32 * 2);
    BOOST_TEST(!record.contains("moe/layer1.aux_loss"));  // layer 1 is dense
  }

  // Megatron's names: the MoE layer's router and experts by global index, the dense layer's MLP.
  const std::string weights = file_bytes(straight / "checkpoints" / "step_00000010" / "model.safetensors");
  for (const char* name :
       {"decoder.layers.0.pre_mlp_layernorm.weight", "decoder.layers.0.mlp.router.weight",
        "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight",
        "decoder.layers.0.mlp.experts.local_experts.3.linear_fc2.weight", "decoder.layers.1.mlp.linear_fc1.weight"})
    BOOST_TEST(contains(weights, name), name);
  BOOST_TEST(!contains(weights, "decoder.layers.1.mlp.router.weight"));

  const auto resumed = corpus.dir.path() / "resumed";
  const auto first = run_process(corpus.train(resumed.string(), kMoeGpt + " --set checkpoint.interval=10"));
  BOOST_TEST_REQUIRE(first.status == 0, first.output);
  std::vector<double> losses = step_losses(resumed / "metrics.jsonl");
  losses.resize(10);
  fs::remove(resumed / "metrics.jsonl");
  fs::remove_all(resumed / "checkpoints" / "step_00000020");
  const auto second = run_process(
      corpus.train(resumed.string(), kMoeGpt + " --resume " + quote((resumed / "checkpoints" / "step_00000010").string())));
  BOOST_TEST_REQUIRE(second.status == 0, second.output);
  for (double l : step_losses(resumed / "metrics.jsonl")) losses.push_back(l);
  BOOST_TEST(losses == expected, boost::test_tools::per_element());  // bit-exact
  BOOST_TEST((file_bytes(resumed / "checkpoints" / "step_00000020" / "model.safetensors") ==
              file_bytes(straight / "checkpoints" / "step_00000020" / "model.safetensors")));
}

// The aux-loss-free expert bias through the engine: a buffer, so checkpointed under Megatron's
// name with no Adam moments, moved only by the layer (every element a whole number of update
// rates, at most one per step: the rate 1/1024 keeps the float32 sums exact), not all zero, and
// resumed exactly: the run resumed from its step-10 checkpoint ends with the same bytes, bias
// included.
BOOST_AUTO_TEST_CASE(the_expert_bias_is_checkpointed_state_and_resumes_bit_exactly) {
  Corpus corpus;
  // A power of two, so every bias is an exact multiple; small against the sigmoid scores' spread
  // at initialization (larger steps make the selection flip every step and the bias return to
  // zero at even steps).
  const double rate = 1.0 / 1024;
  const std::string bias =
      kMoeGpt + " --set model.moe.options.moe_router_enable_expert_bias=true" +
      " --set model.moe.options.moe_router_score_function=sigmoid" +
      " --set model.moe.options.moe_router_bias_update_rate=0.0009765625 --set checkpoint.interval=10";
  const auto straight = corpus.dir.path() / "straight";
  const auto a = run_process(corpus.train(straight.string(), bias));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  const auto saved = plexus::checkpoint::load_checkpoint(straight / "checkpoints" / "step_00000020");
  const std::string name = "decoder.layers.0.mlp.router.expert_bias";
  BOOST_TEST_REQUIRE(saved.model.contains(name));
  BOOST_TEST(!saved.optimizer.contains(name + ".exp_avg"));
  BOOST_TEST(!saved.optimizer.contains(name + ".exp_avg_sq"));
  BOOST_TEST(saved.optimizer.contains("decoder.layers.0.mlp.router.weight.exp_avg"));
  const auto values = saved.model.tensor(name);
  BOOST_TEST_REQUIRE(values.bytes.size() == 4 * sizeof(float));
  const auto* b = reinterpret_cast<const float*>(values.bytes.data());
  double moved = 0;
  for (int e = 0; e < 4; ++e) {
    const double steps = static_cast<double>(b[e]) / rate;
    BOOST_TEST(steps == std::round(steps), "element " << e << ": " << b[e]);
    BOOST_TEST(std::abs(steps) <= 20.0);
    moved += std::abs(steps);
  }
  BOOST_TEST(moved > 0.0);

  const auto resumed = corpus.dir.path() / "resumed";
  const auto second = run_process(
      corpus.train(resumed.string(), bias + " --resume " + quote((straight / "checkpoints" / "step_00000010").string())));
  BOOST_TEST_REQUIRE(second.status == 0, second.output);
  BOOST_TEST((file_bytes(resumed / "checkpoints" / "step_00000020" / "model.safetensors") ==
              file_bytes(straight / "checkpoints" / "step_00000020" / "model.safetensors")));
}

BOOST_AUTO_TEST_CASE(a_pattern_with_e_trains) {
  Corpus corpus;
  const auto out = corpus.dir.path() / "pattern";
  const auto r = run_process(corpus.train(
      out.string(), "--set 'model.pattern=*E*E' --set model.num_layers=4 --set checkpoint.interval=20" + kMoe));
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const std::vector<double> losses = step_losses(out / "metrics.jsonl");
  BOOST_TEST_REQUIRE(losses.size() == 20u);
  BOOST_TEST(losses.back() < losses.front() - 0.2, "loss " << losses.front() << " -> " << losses.back());
  const std::string weights = file_bytes(out / "checkpoints" / "step_00000020" / "model.safetensors");
  BOOST_TEST(contains(weights, "decoder.layers.3.mlp.experts.local_experts.2.linear_fc1.weight"));
}

BOOST_AUTO_TEST_CASE(model_show_lists_the_moe_layers) {
  const auto r = run_process(kBin + "plexus model show --set model.num_layers=2" + kMoeGpt);
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  BOOST_TEST(contains(r.output, "moe.layer"), r.output);
  BOOST_TEST(contains(r.output, "transformer.mlp"), r.output);  // layer 1 stays dense
  BOOST_TEST(contains(r.output, "an MoE MLP every 2 layers from layer 0 (model.moe.layer_freq)"), r.output);
}

BOOST_AUTO_TEST_CASE(bad_moe_settings_stop_the_run_naming_the_key) {
  Corpus corpus;
  const auto topk = run_process(corpus.train((corpus.dir.path() / "topk").string(),
                                             " --set model.moe.layer_freq=1 --set model.moe.options.num_moe_experts=2"
                                             " --set model.moe.options.moe_router_topk=3"));
  BOOST_TEST(topk.status == 1);
  BOOST_TEST(contains(topk.output, "moe_router_topk (3) must not exceed num_moe_experts (2)"), topk.output);
  const auto score = run_process(corpus.train((corpus.dir.path() / "score").string(),
                                              " --set model.moe.layer_freq=1"
                                              " --set model.moe.options.moe_router_score_function=sinkhorn"));
  BOOST_TEST(score.status == 1);
  BOOST_TEST(contains(score.output, "model.moe.options.moe_router_score_function"), score.output);
  const auto experts = run_process(corpus.train((corpus.dir.path() / "experts").string(),
                                                " --set model.moe.layer_freq=1 --set model.moe.options.num_moe_experts=0"));
  BOOST_TEST(experts.status == 1);
  BOOST_TEST(contains(experts.output, "model.moe.options.num_moe_experts"), experts.output);
  const auto both = run_process(corpus.train((corpus.dir.path() / "both").string(),
                                             " --set 'model.pattern=*E' --set model.moe.layer_freq=1"));
  BOOST_TEST(both.status == 1);
  BOOST_TEST(contains(both.output, "model.moe.layer_freq (1) applies to the GPT only"), both.output);
  BOOST_TEST(!fs::exists(corpus.dir.path() / "topk" / "checkpoints"));
}

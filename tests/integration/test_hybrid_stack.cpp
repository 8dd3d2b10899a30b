// The decoder's structure as a stack component (plexus/stack.h, plugins/hybrid_stack): plexus-train
// as a user runs it. The GPT is the stack "[*-]" x num_layers, so a GPT run and the same pattern
// spelled out train bit-identically and resume from each other's checkpoints; grammar errors stop
// the run naming model.pattern and the character; a third-party layer takes a pattern symbol.
#define BOOST_TEST_MODULE hybrid_stack
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

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

// The spelled-out GPT of the corpus's 2-layer model.
const std::string kGptPattern = "--set 'model.pattern=[*-][*-]' --set model.num_layers=4";

}  // namespace

BOOST_AUTO_TEST_CASE(the_gpt_is_the_attention_mlp_stack) {
  Corpus corpus;
  const auto gpt = corpus.dir.path() / "gpt";
  const auto pattern = corpus.dir.path() / "pattern";
  const auto a = run_process(corpus.train(gpt.string(), "--set train.steps=10 --set checkpoint.interval=10"));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  const auto b =
      run_process(corpus.train(pattern.string(), kGptPattern + " --set train.steps=10 --set checkpoint.interval=10"));
  BOOST_TEST_REQUIRE(b.status == 0, b.output);
  const std::vector<double> losses = step_losses(gpt / "metrics.jsonl");
  BOOST_TEST_REQUIRE(losses.size() == 10u);
  BOOST_TEST(losses == step_losses(pattern / "metrics.jsonl"), boost::test_tools::per_element());  // exact
  // Same tensors under the same names, bit for bit.
  const std::string weights = file_bytes(gpt / "checkpoints" / "step_00000010" / "model.safetensors");
  BOOST_TEST(!weights.empty());
  BOOST_TEST((weights == file_bytes(pattern / "checkpoints" / "step_00000010" / "model.safetensors")));
  BOOST_TEST(contains(weights, "decoder.layers.1.mlp.linear_fc2.weight"));
  BOOST_TEST(contains(weights, "decoder.final_layernorm.weight"));
}

// A GPT checkpoint resumes as the "[*-]" x L pattern and back, continuing bit-identically.
BOOST_AUTO_TEST_CASE(gpt_and_pattern_checkpoints_resume_as_each_other) {
  Corpus corpus;
  const auto straight = corpus.dir.path() / "straight";
  BOOST_TEST_REQUIRE(run_process(corpus.train(straight.string(), "")).status == 0);
  const std::vector<double> expected = step_losses(straight / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == 20u);
  for (const bool gpt_first : {true, false}) {
    const auto out = corpus.dir.path() / (gpt_first ? "gpt_then_pattern" : "pattern_then_gpt");
    const std::string first_model = gpt_first ? "" : kGptPattern;
    const std::string second_model = gpt_first ? kGptPattern : "";
    const auto first = run_process(corpus.train(out.string(), first_model + " --set checkpoint.interval=10"));
    BOOST_TEST_REQUIRE(first.status == 0, first.output);
    std::vector<double> losses = step_losses(out / "metrics.jsonl");
    losses.resize(10);
    fs::remove(out / "metrics.jsonl");
    fs::remove_all(out / "checkpoints" / "step_00000020");
    const auto second = run_process(corpus.train(
        out.string(), second_model + " --resume " + quote((out / "checkpoints" / "step_00000010").string())));
    BOOST_TEST_REQUIRE(second.status == 0, second.output);
    for (double l : step_losses(out / "metrics.jsonl")) losses.push_back(l);
    BOOST_TEST(losses == expected, boost::test_tools::per_element());
  }
}

// The same layers stored under other names are another layout: refused, saying how to convert.
BOOST_AUTO_TEST_CASE(a_checkpoint_of_another_layout_is_refused) {
  Corpus corpus;
  const auto out = corpus.dir.path() / "run";
  BOOST_TEST_REQUIRE(run_process(corpus.train(out.string(), "--set train.steps=2")).status == 0);
  const auto other = run_process(corpus.train(
      (corpus.dir.path() / "other").string(), "--set 'model.pattern=*-*-' --set model.num_layers=4 --set train.steps=4 "
                                              "--resume " + quote((out / "checkpoints" / "step_00000002").string())));
  BOOST_TEST(other.status == 1);
  BOOST_TEST(contains(other.output, "decoder: checkpoint the GPT of 2 layers (4 layers), this run the pattern \"*-*-\""),
             other.output);
  BOOST_TEST(contains(other.output, "plexus checkpoint convert"), other.output);
}

BOOST_AUTO_TEST_CASE(pattern_errors_name_the_key_and_the_character) {
  const auto bad = run_process(kBin + "plexus config check --default --set 'model.pattern=*-[*E-]' --set model.num_layers=5");
  BOOST_TEST(bad.status == 1);
  BOOST_TEST(contains(bad.output, "model.pattern"), bad.output);
  BOOST_TEST(contains(bad.output, "MoE layer 'E' must be the last symbol inside a layer group (character 5)"),
             bad.output);
  const auto family = run_process(kBin + "plexus config check --default --set 'model.pattern=*-[*-*]' --set model.num_layers=5");
  BOOST_TEST(family.status == 1);
  BOOST_TEST(contains(family.output, "a group holds at most one layer of each key family (character 6)"), family.output);
  const auto unknown = run_process(kBin + "plexus config check --default --set 'model.pattern=*-Q' --set model.num_layers=3");
  BOOST_TEST(unknown.status == 1);
  BOOST_TEST(contains(unknown.output, "'Q' is not a valid layer symbol. Valid symbols are: '*' (attention), '-' (MLP)"),
             unknown.output);
  const auto count = run_process(kBin + "plexus config check --default --set 'model.pattern=*-*-'");
  BOOST_TEST(count.status == 0, count.output);  // the default num_layers, 4, is its layer count
  const auto mismatch = run_process(kBin + "plexus config check --default --set 'model.pattern=*-*-*-'");
  BOOST_TEST(mismatch.status == 1);
  BOOST_TEST(contains(mismatch.output, "set model.num_layers to 6"), mismatch.output);
}

// 'E' is the MoE layer of plugins/moe (loaded on demand); a component no plugin provides is
// named in the error with the symbol that needs it.
BOOST_AUTO_TEST_CASE(moe_symbol_is_the_moe_layer) {
  const auto ok = run_process(kBin + "plexus config check --default --set 'model.pattern=[*E][*-]'");
  BOOST_TEST(ok.status == 0, ok.output);
  const auto r = run_process(kBin +
                             "plexus config check --default --set 'model.pattern=[*E][*-]' "
                             "--set model.moe.component=moe.missing");
  BOOST_TEST(r.status == 1);
  BOOST_TEST(contains(r.output, "moe.missing"), r.output);
  BOOST_TEST(contains(r.output, "pattern symbol 'E'"), r.output);
}

// '/' parts are multi-token-prediction blocks, trained with the model (integration.test_mtp_training
// has the rest): a grouped main decoder and an ungrouped block.
BOOST_AUTO_TEST_CASE(multi_token_prediction_blocks_train) {
  Corpus corpus;
  const auto r = run_process(corpus.train((corpus.dir.path() / "mtp").string(),
                                          "--set 'model.pattern=[*-][*-]/*-' --set model.num_layers=4"));
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const auto last = plexus::test::records(corpus.dir.path() / "mtp" / "metrics.jsonl", "step").back();
  BOOST_TEST(last.at("mtp_losses").as_array().size() == 1u);
}

// A layer from a third-party plugin (written in C, built against the SDK) takes a symbol of its own.
BOOST_AUTO_TEST_CASE(a_third_party_layer_takes_a_symbol) {
  Corpus corpus;
  const auto out = corpus.dir.path() / "third_party";
  const std::string fixtures = std::string(PLEXUS_BUILD_DIR) + "/tests/plugins";
  const auto r = run_process(corpus.train(
      out.string(), "--set 'plugins.paths=[" + boost::json::serialize(boost::json::value(fixtures)) +
                        "]' --set 'plugins.load=[\"sequential_scheduler\", \"transformer\", \"fixture_c_layer\"]'"
                        " --set 'model.pattern=[*-]S[*-]' --set model.num_layers=5"
                        " --set 'model.stack.options={\"symbols\": {\"S\": {\"component\": \"fixture.c_scale\"}}}'"
                        " --set train.steps=4 --set checkpoint.interval=4"));
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const std::string weights = file_bytes(out / "checkpoints" / "step_00000004" / "model.safetensors");
  BOOST_TEST(contains(weights, "\"decoder.layers.1.weight\""));            // the scale layer, logical layer 1
  BOOST_TEST(contains(weights, "\"decoder.layers.2.self_attention.linear_qkv.weight\""));
  BOOST_TEST(contains(weights, "\"decoder.final_layernorm.weight\""));     // a grouped pattern
  const std::vector<double> losses = step_losses(out / "metrics.jsonl");
  BOOST_TEST_REQUIRE(losses.size() == 4u);
  BOOST_TEST(losses.back() < losses.front());
}

// A Mamba/attention hybrid with mHC around every layer trains, and resumes bit-identically.
BOOST_AUTO_TEST_CASE(a_hybrid_with_mhc_resumes_exactly) {
  Corpus corpus;
  const std::string hybrid =
      "--set 'model.pattern=M*[M-]' --set model.num_layers=4"
      " --set 'model.mamba.options={\"mamba_state_dim\": 8, \"mamba_head_dim\": 16, \"mamba_num_groups\": 2, "
      "\"chunk_size\": 12}'"
      " --set 'plugins.load=[\"sequential_scheduler\", \"transformer\", \"mhc_fused\"]'"
      " --set mhc.enabled=true --set mhc.num_residual_streams=2 --set mhc.backend=mhc_fused ";
  const auto straight = corpus.dir.path() / "straight";
  const auto split = corpus.dir.path() / "split";
  const auto a = run_process(corpus.train(straight.string(), hybrid));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  const std::vector<double> expected = step_losses(straight / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == 20u);
  BOOST_TEST(expected.back() < expected.front());
  const auto first = run_process(corpus.train(split.string(), hybrid + "--set checkpoint.interval=10"));
  BOOST_TEST_REQUIRE(first.status == 0, first.output);
  std::vector<double> losses = step_losses(split / "metrics.jsonl");
  losses.resize(10);
  fs::remove(split / "metrics.jsonl");
  fs::remove_all(split / "checkpoints" / "step_00000020");
  const auto second =
      run_process(corpus.train(split.string(), hybrid + "--resume " + quote((split / "checkpoints" / "step_00000010").string())));
  BOOST_TEST_REQUIRE(second.status == 0, second.output);
  for (double l : step_losses(split / "metrics.jsonl")) losses.push_back(l);
  BOOST_TEST(losses == expected, boost::test_tools::per_element());
  const std::string weights = file_bytes(split / "checkpoints" / "step_00000020" / "model.safetensors");
  BOOST_TEST(contains(weights, "\"decoder.layers.0.mixer.in_proj.weight\""));
  BOOST_TEST(contains(weights, "\"decoder.layers.2.mlp.linear_fc1.weight\""));  // the group [M-] is layer 2
  BOOST_TEST(contains(weights, "\"decoder.layers.2.mixer_hyper_connection.mapping_proj.weight\""));
  BOOST_TEST(contains(weights, "\"decoder.final_layernorm.weight\""));
}

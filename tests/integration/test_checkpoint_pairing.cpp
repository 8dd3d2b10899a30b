// `plexus checkpoint convert` pairs layers by what they are, as the stack's plan and the layers
// themselves say, not by pattern symbols or tensor names it knows: the attention component under a
// symbol of the user's own pairs with the GPT's attention; a third-party layer, which no GPT layer is
// made of, is refused by its label and component; mHC's connection tensors follow their layer both
// ways. `plexus checkpoint inspect` describes the decoder by the saved config's stack, and lists the
// tensors all the same when that stack cannot be loaded.
#define BOOST_TEST_MODULE checkpoint_pairing
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

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
namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string file_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

plexus::test::ProcessResult convert(const fs::path& source, const fs::path& destination,
                                    const std::string& options) {
  return run_process(kBin + "plexus checkpoint convert " + quote(source.string()) + " " +
                     quote(destination.string()) + " " + options);
}

fs::path step_dir(const fs::path& run, int step) {
  return run / "checkpoints" / ck::checkpoint_dir_name(step);
}

// The fixture plugins' directory and the C layer's scale component as the symbol 'S'; 'A' is the
// transformer's attention under a symbol of the user's own.
const std::string kFixtures = std::string(PLEXUS_BUILD_DIR) + "/tests/plugins";
const std::string kSymbols =
    " --set 'plugins.paths=[" + boost::json::serialize(boost::json::value(kFixtures)) +
    "]' --set 'plugins.load=[\"sequential_scheduler\", \"transformer\", \"fixture_c_layer\"]'"
    " --set 'model.stack.options={\"symbols\": {\"S\": {\"component\": \"fixture.c_scale\"}, "
    "\"A\": {\"component\": \"transformer.attention\", \"family\": \"self_attention\"}}}' ";

}  // namespace

// "A-A-" is the GPT's attention and MLP layers under another symbol: paired by component, the GPT's
// checkpoint converts to it and the run continues bit-identically.
BOOST_AUTO_TEST_CASE(layers_pair_by_component_whatever_their_symbol) {
  Corpus corpus;
  const fs::path gpt = corpus.dir.path() / "gpt";
  const auto a =
      run_process(corpus.train(gpt.string(), kSymbols + "--set train.steps=6 --set checkpoint.interval=3"));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  const fs::path start = corpus.dir.path() / "start";
  const auto converted =
      convert(step_dir(gpt, 3), start, "--direction gpt-to-hybrid --hybrid-layer-pattern 'A-A-'");
  BOOST_TEST_REQUIRE(converted.status == 0, converted.output);
  BOOST_TEST(contains(converted.output, "(the pattern \"A-A-\")"), converted.output);
  const ck::LoadedCheckpoint loaded = ck::load_checkpoint(start);
  BOOST_TEST(
      loaded.model.contains("decoder.layers.2.self_attention.linear_qkv.weight"));  // GPT layer 1's attention
  BOOST_TEST(loaded.model.contains("decoder.layers.2.input_layernorm.weight"));
  BOOST_TEST(loaded.model.contains("decoder.layers.3.mlp.linear_fc2.weight"));  // GPT layer 1's MLP
  BOOST_TEST(!loaded.model.contains("decoder.layers.1.self_attention.linear_qkv.weight"));

  const fs::path hybrid = corpus.dir.path() / "hybrid";
  const auto b =
      run_process(corpus.train(hybrid.string(), kSymbols +
                                                    "--set 'model.pattern=A-A-' --set model.num_layers=4 "
                                                    "--set train.steps=6 --resume " +
                                                    quote(start.string())));
  BOOST_TEST_REQUIRE(b.status == 0, b.output);
  const std::vector<double> expected = step_losses(gpt / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == 6u);
  BOOST_TEST(
      step_losses(hybrid / "metrics.jsonl") == std::vector<double>(expected.begin() + 3, expected.end()),
      boost::test_tools::per_element());  // exact
}

// A third-party layer has no GPT counterpart: refused in the source or the destination, named by
// its label and component, and nothing is written.
BOOST_AUTO_TEST_CASE(a_layer_no_gpt_is_made_of_is_refused_by_label_and_component) {
  Corpus corpus;
  const fs::path hybrid = corpus.dir.path() / "hybrid";
  const auto trained = run_process(
      corpus.train(hybrid.string(), kSymbols + "--set 'model.pattern=[*-]S[*-]' --set model.num_layers=5"
                                               " --set train.steps=2 --set checkpoint.interval=2"));
  BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
  const fs::path out = corpus.dir.path() / "out";
  const auto to_gpt = convert(step_dir(hybrid, 2), out, "--direction hybrid-to-gpt");
  BOOST_TEST(to_gpt.status == 1);
  BOOST_TEST(contains(to_gpt.output,
                      "the checkpoint's decoder (the pattern \"[*-]S[*-]\"): layer decoder.layers.1 "
                      "layer 'S' (fixture.c_scale) has no GPT counterpart"),
             to_gpt.output);
  BOOST_TEST(contains(to_gpt.output, "transformer.attention and transformer.mlp"), to_gpt.output);
  BOOST_TEST(!fs::exists(out));

  const fs::path gpt = corpus.dir.path() / "gpt";
  BOOST_TEST_REQUIRE(
      run_process(corpus.train(gpt.string(), kSymbols + "--set train.steps=2 --set checkpoint.interval=2"))
          .status == 0);
  const auto to_hybrid =
      convert(step_dir(gpt, 2), out, "--direction gpt-to-hybrid --hybrid-layer-pattern '*-S*-'");
  BOOST_TEST(to_hybrid.status == 1);
  BOOST_TEST(contains(to_hybrid.output,
                      "the destination's decoder (the pattern \"*-S*-\"): layer decoder.layers.2 "
                      "layer 'S' (fixture.c_scale) has no GPT counterpart"),
             to_hybrid.output);
  BOOST_TEST(!fs::exists(out));
}

// mHC's connection parameters are the layer's own tensors (its unit's names): GPT -> "*-*-" and
// back, with a run continued in between, ends byte-identical to the GPT run's weights and moments.
BOOST_AUTO_TEST_CASE(mhc_connections_follow_their_layers_both_ways) {
  Corpus corpus;
  const std::string mhc =
      " --set mhc.enabled=true"
      " --set 'plugins.load=[\"sequential_scheduler\",\"transformer\",\"mhc_native\"]' ";
  const fs::path gpt = corpus.dir.path() / "gpt";
  const auto a =
      run_process(corpus.train(gpt.string(), mhc + "--set train.steps=4 --set checkpoint.interval=2"));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  const fs::path start = corpus.dir.path() / "start";
  const auto to_hybrid = convert(step_dir(gpt, 2), start, "--direction gpt-to-hybrid");
  BOOST_TEST_REQUIRE(to_hybrid.status == 0, to_hybrid.output);
  const ck::LoadedCheckpoint converted = ck::load_checkpoint(start);
  BOOST_TEST(
      converted.model.contains("decoder.layers.2.self_attention_hyper_connection.mapping_proj.weight"));
  BOOST_TEST(converted.model.contains("decoder.layers.3.mlp_hyper_connection.alpha_res"));
  BOOST_TEST(converted.optimizer.contains("decoder.layers.3.mlp_hyper_connection.alpha_res.exp_avg"));
  BOOST_TEST(!converted.model.contains("decoder.layers.1.self_attention_hyper_connection.alpha_res"));

  const fs::path hybrid = corpus.dir.path() / "hybrid";
  const auto b = run_process(corpus.train(
      hybrid.string(), mhc +
                           "--set 'model.pattern=*-*-' --set model.num_layers=4 --set train.steps=4"
                           " --set checkpoint.interval=2 --resume " +
                           quote(start.string())));
  BOOST_TEST_REQUIRE(b.status == 0, b.output);
  const fs::path back = corpus.dir.path() / "back";
  const auto to_gpt = convert(step_dir(hybrid, 4), back, "--direction hybrid-to-gpt");
  BOOST_TEST_REQUIRE(to_gpt.status == 0, to_gpt.output);
  const ck::LoadedCheckpoint returned = ck::load_checkpoint(back);
  BOOST_TEST(returned.model.contains("decoder.layers.1.self_attention_hyper_connection.mapping_proj.weight"));
  BOOST_TEST(returned.model.contains("decoder.layers.1.mlp_hyper_connection.alpha_res"));
  for (const char* file : {ck::kModelFile, ck::kOptimizerFile}) {
    const std::string bytes = file_bytes(back / file);
    BOOST_TEST(!bytes.empty());
    BOOST_TEST((bytes == file_bytes(step_dir(gpt, 4) / file)), file);
  }
}

// The decoder is the saved stack's word: a stack no plugin provides leaves it "unknown", saying
// why, and every tensor is listed all the same.
BOOST_AUTO_TEST_CASE(inspect_lists_the_tensors_when_the_stack_cannot_be_loaded) {
  Corpus corpus;
  const fs::path run = corpus.dir.path() / "run";
  BOOST_TEST_REQUIRE(
      run_process(corpus.train(run.string(), "--set train.steps=2 --set checkpoint.interval=2")).status == 0);
  const ck::LoadedCheckpoint real = ck::load_checkpoint(step_dir(run, 2));
  boost::json::value state = real.state;
  state.at("config").at("model").as_object()["stack"] = boost::json::object{{"component", "nowhere.stack"}};
  std::vector<ck::TensorData> model, optimizer;
  for (const auto& t : real.model.tensors())
    model.push_back({std::string(t.name), t.dtype, {t.shape.begin(), t.shape.end()}, t.bytes});
  for (const auto& t : real.optimizer.tensors())
    optimizer.push_back({std::string(t.name), t.dtype, {t.shape.begin(), t.shape.end()}, t.bytes});
  const fs::path odd = ck::write_checkpoint(corpus.dir.path() / "odd", 2, model, optimizer, state);

  const auto text = run_process(kBin + "plexus checkpoint inspect " + quote(odd.string()));
  BOOST_TEST_REQUIRE(text.status == 0, text.output);
  BOOST_TEST(contains(text.output, " decoder unknown (config error at model.stack.component: "), text.output);
  BOOST_TEST(contains(text.output, "nowhere.stack"), text.output);
  BOOST_TEST(contains(text.output, "), hidden 32, 4 heads, sequence 32, vocabulary 256"), text.output);
  BOOST_TEST(contains(text.output, "model.safetensors: 14 tensors"), text.output);
  BOOST_TEST(contains(text.output, "    self_attention.linear_qkv.weight"), text.output);

  const auto json = run_process(kBin + "plexus checkpoint inspect --json " + quote(odd.string()));
  BOOST_TEST_REQUIRE(json.status == 0, json.output);
  const boost::json::value doc = boost::json::parse(json.output);
  BOOST_TEST(contains(std::string(doc.at("decoder").at("unknown").as_string()), "nowhere.stack"));
  BOOST_TEST(doc.at("model_file").at("tensor_count").as_int64() == 14);

  // And convert, which needs the stack, refuses naming it.
  const auto refused = convert(odd, corpus.dir.path() / "out", "--direction gpt-to-hybrid");
  BOOST_TEST(refused.status == 1);
  BOOST_TEST(contains(refused.output, "model.stack.component"), refused.output);
  BOOST_TEST(contains(refused.output, "nowhere.stack"), refused.output);
}

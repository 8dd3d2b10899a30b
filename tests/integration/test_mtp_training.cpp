// Multi-token prediction (model.mtp_num_layers, or '/' parts of model.pattern) through plexus-train
// as a user runs it: the step records carry each depth's loss beside the main loss; the MTP
// branch enters training through its gradient only (with mtp_loss_scaling_factor 0 the main model
// trains bit for bit as without MTP); checkpoints hold Megatron-LM's MTP names for the GPT and the
// hybrid stack and resume exactly; every misfit is refused by name. The MTP arithmetic against
// PyTorch is integration.test_gpt_parity; across pipeline stages, mpi.test_pipeline_training.
#define BOOST_TEST_MODULE mtp_training
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_process.hpp"
#include "tensor_difference.hpp"
#include "train_corpus.hpp"

using plexus::test::quote;
using plexus::test::records;
using plexus::test::run_process;
using plexus::test::step_losses;
using plexus::test::worst_difference;
using Corpus = plexus::test::TrainCorpus;
namespace fs = std::filesystem;

namespace {

const std::string kSteps = " --set train.steps=6 --set checkpoint.interval=3";

void train(const Corpus& corpus, const fs::path& out, const std::string& extra) {
  const auto result = run_process(corpus.train(out.string(), extra));
  BOOST_TEST_REQUIRE(result.status == 0, out.filename() << ":\n" << result.output);
}

std::string refused(const Corpus& corpus, const fs::path& out, const std::string& extra) {
  const auto result = run_process(corpus.train(out.string(), extra));
  BOOST_TEST(result.status != 0, out.filename() << " was expected to fail");
  return result.output;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::set<std::string> mtp_names(const fs::path& checkpoint) {
  std::set<std::string> names;
  for (const std::string& name : plexus::checkpoint::load_checkpoint(checkpoint).model.names())
    if (name.starts_with("mtp.")) names.insert(name);
  return names;
}

}  // namespace

// Two depths: every step record has "mtp_losses" with two finite values that are not the main
// loss and fall as the model trains, and the main loss is the one reported.
BOOST_AUTO_TEST_CASE(each_depth_reports_its_loss) {
  Corpus corpus;
  const fs::path out = corpus.dir.path() / "mtp";
  // No warm-up, so that six steps move every depth's loss beyond the batches' noise.
  train(corpus, out, kSteps + " --set model.mtp_num_layers=2 --set optimizer.lr_warmup_steps=0");
  const auto steps = records(out / "metrics.jsonl", "step");
  BOOST_TEST_REQUIRE(steps.size() == 6u);
  for (const auto& step : steps) {
    const auto& depths = step.at("mtp_losses").as_array();
    BOOST_TEST_REQUIRE(depths.size() == 2u);
    for (const auto& loss : depths) {
      BOOST_TEST(std::isfinite(loss.as_double()));
      BOOST_TEST(loss.as_double() != step.at("loss").as_double());
    }
  }
  for (std::size_t d = 0; d < 2; ++d)
    BOOST_TEST(steps.back().at("mtp_losses").as_array()[d].as_double() <
               steps.front().at("mtp_losses").as_array()[d].as_double());
  // The model's description names the blocks; a model without them writes no "mtp_losses".
  const auto inspected = run_process(plexus::test::kBin + "plexus checkpoint inspect " +
                                     quote((out / "checkpoints" / "step_00000006").string()));
  BOOST_TEST(contains(inspected.output, "the GPT of 2 layers and 2 MTP block(s)"), inspected.output);
  const fs::path plain = corpus.dir.path() / "plain";
  train(corpus, plain, " --set train.steps=1");
  BOOST_TEST(!records(plain / "metrics.jsonl", "step").at(0).contains("mtp_losses"));
}

// The MTP depths reach the main model only through the gradients they send back (into the final
// norm's output and the shared embedding and output layer): with their weight 0 those are exact
// zeros, and the main model's losses and weights are those of the same model without MTP to the
// last bit (parameters are initialized by name, so both start alike).
BOOST_AUTO_TEST_CASE(a_zero_weight_leaves_the_main_model_untouched) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  train(corpus, root / "plain", kSteps);
  train(corpus, root / "weightless",
        kSteps + " --set model.mtp_num_layers=2 --set model.mtp_loss_scaling_factor=0");
  BOOST_TEST(
      step_losses(root / "plain" / "metrics.jsonl") == step_losses(root / "weightless" / "metrics.jsonl"),
      boost::test_tools::per_element());
  const auto plain = plexus::checkpoint::load_checkpoint(root / "plain" / "checkpoints" / "step_00000006");
  const auto weightless =
      plexus::checkpoint::load_checkpoint(root / "weightless" / "checkpoints" / "step_00000006");
  for (const std::string& name : plain.model.names()) {
    BOOST_TEST_REQUIRE(weightless.model.contains(name), name);
    const auto a = plain.model.tensor(name).bytes, b = weightless.model.tensor(name).bytes;
    BOOST_TEST((a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin())), name);
  }
  // ... and with the default weight (0.1) they are not.
  train(corpus, root / "weighted", kSteps + " --set model.mtp_num_layers=2");
  BOOST_TEST(step_losses(root / "plain" / "metrics.jsonl").back() !=
             step_losses(root / "weighted" / "metrics.jsonl").back());
}

// Megatron-LM's names: the GPT's mtp.layers.k.{enorm, hnorm, eh_proj, final_layernorm} and its
// one inner layer under transformer_layer.; a hybrid's inner stack under mtp_model_layer.layers.j.
// (numbered from 0 in each depth). The word embedding and output layer are the model's, not
// repeated per depth.
BOOST_AUTO_TEST_CASE(checkpoints_hold_megatron_mtp_names) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  train(corpus, root / "gpt",
        " --set train.steps=1 --set model.mtp_num_layers=1 --set model.normalization=\\\"LayerNorm\\\"");
  std::set<std::string> expected;
  for (const char* name :
       {"enorm.weight", "enorm.bias", "hnorm.weight", "hnorm.bias", "eh_proj.weight",
        "final_layernorm.weight", "final_layernorm.bias", "transformer_layer.input_layernorm.weight",
        "transformer_layer.input_layernorm.bias", "transformer_layer.self_attention.linear_qkv.weight",
        "transformer_layer.self_attention.linear_proj.weight", "transformer_layer.pre_mlp_layernorm.weight",
        "transformer_layer.pre_mlp_layernorm.bias", "transformer_layer.mlp.linear_fc1.weight",
        "transformer_layer.mlp.linear_fc2.weight"})
    expected.insert(std::string("mtp.layers.0.") + name);
  BOOST_TEST(mtp_names(root / "gpt" / "checkpoints" / "step_00000001") == expected,
             boost::test_tools::per_element());

  train(corpus, root / "hybrid",
        R"( --set 'plugins.load=["sequential_scheduler","transformer","hybrid_stack"]')"
        " --set 'model.pattern=*-*-/*-/*-' --set model.num_layers=4 --set train.steps=1");
  const std::set<std::string> hybrid = mtp_names(root / "hybrid" / "checkpoints" / "step_00000001");
  for (const char* depth : {"mtp.layers.0.", "mtp.layers.1."}) {
    for (const char* name : {"enorm.weight", "hnorm.weight", "eh_proj.weight", "final_layernorm.weight",
                             "mtp_model_layer.layers.0.input_layernorm.weight",
                             "mtp_model_layer.layers.0.self_attention.linear_qkv.weight",
                             "mtp_model_layer.layers.1.pre_mlp_layernorm.weight",
                             "mtp_model_layer.layers.1.mlp.linear_fc2.weight"})
      BOOST_TEST(hybrid.contains(std::string(depth) + name), depth << name);
  }
  BOOST_TEST(hybrid.size() == 2u * (4 + 6));  // per depth: the entry's 3, the final norm, 2 + 4 inner
}

// Stopped at step 3 and resumed, the MTP run ends where the uninterrupted one does, bit for bit.
BOOST_AUTO_TEST_CASE(resume_is_exact) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string mtp = kSteps + " --set model.mtp_num_layers=2";
  train(corpus, root / "whole", mtp);
  train(corpus, root / "first", mtp + " --set train.steps=3");
  train(corpus, root / "second",
        mtp + " --resume " + quote((root / "first" / "checkpoints" / "step_00000003").string()));
  const auto whole = plexus::checkpoint::load_checkpoint(root / "whole" / "checkpoints" / "step_00000006");
  const auto resumed = plexus::checkpoint::load_checkpoint(root / "second" / "checkpoints" / "step_00000006");
  BOOST_TEST(worst_difference(whole.model, resumed.model, 0) == 0.0);
  BOOST_TEST(worst_difference(whole.optimizer, resumed.optimizer, 0) == 0.0);
  // The MTP depths are part of the model: a run without them does not resume the checkpoint.
  const std::string out =
      refused(corpus, root / "without",
              kSteps + " --resume " + quote((root / "first" / "checkpoints" / "step_00000003").string()));
  BOOST_TEST(contains(out, "decoder: checkpoint the GPT of 2 layers and 2 MTP block(s)"), out);
}

BOOST_AUTO_TEST_CASE(misfits_are_refused_by_name) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string hybrid = R"( --set 'plugins.load=["sequential_scheduler","transformer","hybrid_stack"]')";
  // The pattern's '/' parts and model.mtp_num_layers disagree.
  std::string out = refused(
      corpus, root / "count",
      hybrid + " --set 'model.pattern=*-*-/*-' --set model.num_layers=4 --set model.mtp_num_layers=2");
  BOOST_TEST(contains(out, "model.mtp_num_layers is 2"), out);
  BOOST_TEST(contains(out, "1 MTP block"), out);
  // MTP blocks sit on the last stage: no pipeline segment starts inside or after one.
  out =
      refused(corpus, root / "segment", hybrid + " --set 'model.pattern=*-/*-|*-' --set model.num_layers=2");
  BOOST_TEST(contains(out, "model.pattern"), out);
  BOOST_TEST(contains(out, "the MTP blocks sit on the last pipeline stage"), out);
  // mHC wraps the main decoder's layers only: with MTP it is refused.
  out = refused(corpus, root / "mhc",
                R"( --set 'plugins.load=["sequential_scheduler","transformer","mhc_native"]')"
                " --set mhc.enabled=true --set mhc.backend=mhc_native --set model.mtp_num_layers=1");
  BOOST_TEST(contains(out, "mhc.enabled"), out);
  BOOST_TEST(contains(out, "multi-token-prediction"), out);
  // A negative number of depths, and a negative loss weight.
  out = refused(corpus, root / "depths", " --set model.mtp_num_layers=-1");
  BOOST_TEST(contains(out, "model.mtp_num_layers"), out);
  out = refused(corpus, root / "weight",
                " --set model.mtp_num_layers=1 --set model.mtp_loss_scaling_factor=-0.5");
  BOOST_TEST(contains(out, "model.mtp_loss_scaling_factor"), out);
}

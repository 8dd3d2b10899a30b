// plexus-train writes checkpoints in the spelling checkpoint.names asks for, Megatron-LM's local
// or Transformer Engine names of the pre-norms, and resumes from either whatever it is set to,
// bit for bit; a checkpoint holding one tensor under both spellings is refused, naming both.
#define BOOST_TEST_MODULE checkpoint_names
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_edit.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/checkpoint/tensor_names.hpp"
#include "run_process.hpp"
#include "train_corpus.hpp"

using plexus::test::quote;
using plexus::test::run_process;
using plexus::test::step_losses;
using plexus::test::TrainCorpus;

namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;

namespace {

// LayerNorm, so that the pre-norms have biases with TE names too; 8 steps, split 4 + 4.
const std::string kModel = " --set model.normalization=\\\"LayerNorm\\\" --set train.steps=8";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Megatron-LM's two spellings of a GPT layer's pre-norms (gpt_layer_specs.py: the Transformer
// Engine spec fuses each into the linear after it), the names the transformer plugin's layers must
// declare: `name` (a tensor of either spelling, or its moment) in `style`.
std::string spelled(const std::string& name, ck::NameStyle style) {
  static const std::pair<std::string, std::string> kFused[] = {
      {"input_layernorm.", "self_attention.linear_qkv.layer_norm_"},
      {"pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_"}};
  if (!name.starts_with("decoder.layers.")) return name;
  for (const auto& [local, te] : kFused) {
    const std::string& from = style == ck::NameStyle::te ? local : te;
    const std::string& to = style == ck::NameStyle::te ? te : local;
    if (const std::size_t at = name.find(from); at != std::string::npos)
      return name.substr(0, at) + to + name.substr(at + from.size());
  }
  return name;
}

// Every tensor of `a` is in `b` under its `b_style` spelling with the same shape and bytes, and
// `b` has no others.
void expect_same_tensors(const fs::path& a_file, const fs::path& b_file, ck::NameStyle b_style) {
  const auto a = ck::SafetensorsFile::open(a_file);
  const auto b = ck::SafetensorsFile::open(b_file);
  BOOST_TEST(a.size() == b.size());
  for (const auto& name : a.names()) {
    const std::string other = spelled(name, b_style);
    BOOST_TEST_REQUIRE(b.contains(other), b_file << " lacks " << other);
    const auto x = a.tensor(name), y = b.tensor(other);
    BOOST_TEST((std::vector<int64_t>(x.shape.begin(), x.shape.end()) ==
                std::vector<int64_t>(y.shape.begin(), y.shape.end())),
               name);
    BOOST_TEST((x.bytes.size() == y.bytes.size() &&
                std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) == 0),
               name << " differs");
  }
}

// Trains 4 steps writing `first` names, resumes for the other 4 under `second`; returns the 8
// losses and leaves the run in `out`.
std::vector<double> split_run(const TrainCorpus& corpus, const fs::path& out, const std::string& first,
                              const std::string& second) {
  const auto a = run_process(
      corpus.train(out.string(), kModel + " --set checkpoint.interval=4 --set checkpoint.names=" + first));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  std::vector<double> losses = step_losses(out / "metrics.jsonl");
  losses.resize(4);
  fs::remove(out / "metrics.jsonl");
  fs::remove_all(out / "checkpoints" / "step_00000008");
  const auto b =
      run_process(corpus.train(out.string(), kModel + " --set checkpoint.names=" + second + " --resume " +
                                                 quote((out / "checkpoints" / "step_00000004").string())));
  BOOST_TEST_REQUIRE(b.status == 0, b.output);
  for (double l : step_losses(out / "metrics.jsonl")) losses.push_back(l);
  return losses;
}

}  // namespace

BOOST_AUTO_TEST_CASE(te_names_are_written_and_both_spellings_resume_exactly) {
  TrainCorpus corpus;
  const auto straight = corpus.dir.path() / "straight";
  const auto run = run_process(corpus.train(straight.string(), kModel));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  const std::vector<double> expected = step_losses(straight / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == 8u);
  const fs::path straight_model = straight / "checkpoints" / "step_00000008" / "model.safetensors";
  const fs::path straight_optimizer = straight / "checkpoints" / "step_00000008" / "optimizer.safetensors";

  // TE names written, resumed under local.
  const auto te_first = corpus.dir.path() / "te_first";
  BOOST_TEST(split_run(corpus, te_first, "te", "local") == expected, boost::test_tools::per_element());
  const auto te_model =
      ck::SafetensorsFile::open(te_first / "checkpoints" / "step_00000004" / "model.safetensors");
  for (const std::string layer : {"decoder.layers.0.", "decoder.layers.1."}) {
    for (const std::string name :
         {"self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_qkv.layer_norm_bias",
          "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.layer_norm_bias"})
      BOOST_TEST(te_model.contains(layer + name), layer + name);
    for (const std::string name : {"input_layernorm.weight", "input_layernorm.bias",
                                   "pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias"})
      BOOST_TEST(!te_model.contains(layer + name), layer + name);
  }
  BOOST_TEST(te_model.contains("decoder.final_layernorm.weight"));  // one spelling in both specs
  const auto te_optimizer =
      ck::SafetensorsFile::open(te_first / "checkpoints" / "step_00000004" / "optimizer.safetensors");
  BOOST_TEST(te_optimizer.contains("decoder.layers.1.mlp.linear_fc1.layer_norm_bias.exp_avg_sq"));
  // Its continuation under local writes what the straight run wrote.
  expect_same_tensors(straight_model, te_first / "checkpoints" / "step_00000008" / "model.safetensors",
                      ck::NameStyle::local);
  expect_same_tensors(straight_optimizer,
                      te_first / "checkpoints" / "step_00000008" / "optimizer.safetensors",
                      ck::NameStyle::local);

  // Local names written, resumed under te: the same run, written with TE names.
  const auto local_first = corpus.dir.path() / "local_first";
  BOOST_TEST(split_run(corpus, local_first, "local", "te") == expected, boost::test_tools::per_element());
  expect_same_tensors(straight_model, local_first / "checkpoints" / "step_00000008" / "model.safetensors",
                      ck::NameStyle::te);
  expect_same_tensors(straight_optimizer,
                      local_first / "checkpoints" / "step_00000008" / "optimizer.safetensors",
                      ck::NameStyle::te);
}

BOOST_AUTO_TEST_CASE(a_tensor_under_both_spellings_is_refused_naming_it) {
  TrainCorpus corpus;
  const auto out = corpus.dir.path() / "run";
  BOOST_TEST_REQUIRE(run_process(corpus.train(out.string(), kModel + " --set train.steps=2")).status == 0);
  const auto ckpt = out / "checkpoints" / "step_00000002";
  const std::string local = "decoder.layers.1.pre_mlp_layernorm.bias";
  const std::string te = "decoder.layers.1.mlp.linear_fc1.layer_norm_bias";
  plexus::test::rewrite_checkpoint_file(ckpt, "model.safetensors", [&](plexus::test::EditableFile& f) {
    f.tensors[te] = f.tensors.at(local);  // a converter that added the TE name and kept the local one
  });
  for (const std::string names : {"local", "te"}) {
    const auto resumed = run_process(
        corpus.train(out.string(), kModel + " --set train.steps=4 --set checkpoint.names=" + names +
                                       " --resume " + quote(ckpt.string())));
    BOOST_TEST(resumed.status == 1, resumed.output);
    BOOST_TEST((contains(resumed.output, local) && contains(resumed.output, te) &&
                contains(resumed.output, "model.safetensors")),
               resumed.output);
    BOOST_TEST(!fs::exists(out / "checkpoints" / "step_00000004"));
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_names_setting_is_refused_naming_the_key) {
  TrainCorpus corpus;
  const auto run = run_process(corpus.train((corpus.dir.path() / "bad").string(),
                                            " --set checkpoint.names=\\\"transformer_engine\\\""));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(contains(run.output, "checkpoint.names"), run.output);
  BOOST_TEST(contains(run.output, "\"te\""), run.output);
}

// An MoE layer under TE names (Megatron's TE spec keeps its pre_mlp_layernorm a module of its own)
// beside a dense one (fused into linear_fc1); with moe_grouped_gemm its experts spelled as
// TEGroupedMLP's. A run resumes from it under local names and goes on exactly.
BOOST_AUTO_TEST_CASE(moe_layers_under_te_names) {
  TrainCorpus corpus;
  const std::string moe = kModel +
                          " --set model.moe.layer_freq=2"
                          R"( --set 'model.moe.options={"num_moe_experts": 2, "moe_router_topk": 1, )"
                          R"("moe_ffn_hidden_size": 16, "moe_grouped_gemm": true}')";
  const auto straight = corpus.dir.path() / "straight";
  const auto a = run_process(corpus.train(straight.string(), moe));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  const auto te = corpus.dir.path() / "te";
  const auto b = run_process(corpus.train(
      te.string(), moe + " --set train.steps=4 --set checkpoint.interval=4 --set checkpoint.names=te"));
  BOOST_TEST_REQUIRE(b.status == 0, b.output);
  const auto written = ck::SafetensorsFile::open(te / "checkpoints" / "step_00000004" / "model.safetensors");
  for (const std::string name :
       {"decoder.layers.0.pre_mlp_layernorm.weight", "decoder.layers.0.pre_mlp_layernorm.bias",
        "decoder.layers.0.mlp.experts.linear_fc1.weight0", "decoder.layers.0.mlp.experts.linear_fc2.weight1",
        "decoder.layers.1.mlp.linear_fc1.layer_norm_weight",
        "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"})
    BOOST_TEST(written.contains(name), name);
  for (const std::string name : {"decoder.layers.0.mlp.linear_fc1.layer_norm_weight",
                                 "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight",
                                 "decoder.layers.1.pre_mlp_layernorm.weight"})
    BOOST_TEST(!written.contains(name), name);
  const auto c = run_process(
      corpus.train(te.string(), moe + " --resume " + quote((te / "checkpoints" / "step_00000004").string())));
  BOOST_TEST_REQUIRE(c.status == 0, c.output);
  const std::vector<double> whole = step_losses(straight / "metrics.jsonl");
  const std::vector<double> resumed = step_losses(te / "metrics.jsonl");
  BOOST_TEST_REQUIRE(whole.size() == 8u);
  BOOST_TEST_REQUIRE(resumed.size() >= 4u);
  BOOST_TEST((std::vector<double>(resumed.end() - 4, resumed.end()) ==
              std::vector<double>(whole.end() - 4, whole.end())),
             boost::test_tools::per_element());
}

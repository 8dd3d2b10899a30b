// plexus checkpoint export --format hf: a trained GPT with RMSNorm, SwiGLU, RoPE and grouped query
// attention, exported and loaded by Hugging Face transformers (tests/reference/hf_logits.py in the
// venv <repo>/.venv-hf of scripts/python-env.sh) as LlamaForCausalLM, gives the logits Plexus
// gives on the same tokens: within 1e-4 of the largest logit (float32 on both sides; the sums run
// in other orders and the rotary angles are float32 there, double here: ~1e-6 measured). Tied and
// untied output layers, a padded vocabulary, TE-named pre-norms. The way back: a Llama saved by
// transformers (bfloat16) imports with the same logits and loss and trains on. What either side
// cannot hold is refused naming it, and an existing output directory is never written into.
// Without the venv the module reports itself skipped.
#define BOOST_TEST_MODULE hf_export
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/engine/model.hpp"
#include "plexus/core/run_config.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "train_corpus.hpp"
#include "venv_python.hpp"

using plexus::test::quote;
using plexus::test::run_process;
using plexus::test::TrainCorpus;
namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;

namespace {

const std::string kPlexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus";

fs::path hf_python() {
  return plexus::test::venv_python("PLEXUS_HF_VENV", ".venv-hf");
}

bool has_transformers() {
  return plexus::test::python_runs(hf_python(), "from transformers import LlamaForCausalLM");
}

// A Llama-shaped GPT: SwiGLU, RMSNorm (the default), 4 query heads in 2 groups of head dim 8.
const std::string kLlama =
    "--set train.steps=3 --set checkpoint.interval=3 --set model.activation=\\\"swiglu\\\""
    " --set model.num_attention_heads=4 --set model.num_query_groups=2";

// Plexus's logits of every position of `tokens` ([1, S]) from the checkpoint's weights, [S, V].
std::vector<float> plexus_logits(const fs::path& checkpoint, const std::vector<int32_t>& tokens,
                                 int64_t& vocab) {
  const ck::LoadedCheckpoint loaded = ck::load_checkpoint(checkpoint);
  boost::json::value config = loaded.state.as_object().at("config");
  plexus::PluginHost host;
  plexus::load_configured_plugins(host, config,
                                  {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false});
  plexus::check_components(host, config);
  plexus::Model model(host, config);
  model.initialize(1);
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    plexus::Parameter& p = model.parameters()[i];
    const std::string name = loaded.model.contains(p.name) ? p.name : p.te_name;
    const ck::TensorView t = loaded.model.tensor(name);
    BOOST_TEST_REQUIRE(t.bytes.size() == p.value.bytes(), name);
    std::memcpy(p.value.raw(), t.bytes.data(), t.bytes.size());
  }
  vocab = model.settings().vocab_size;
  const auto seq = static_cast<int64_t>(tokens.size());
  plexus::Batch batch{plexus::Tensor({1, seq}, plx_dtype_i32()), plexus::Tensor({1, seq}, plx_dtype_i32())};
  for (int64_t s = 0; s < seq; ++s) {
    batch.tokens.data<int32_t>()[s] = tokens[static_cast<std::size_t>(s)];
    batch.targets.data<int32_t>()[s] = -1;
  }
  std::vector<float> out;
  for (int64_t s = 0; s < seq; ++s) {
    const std::vector<float> row = model.next_token_logits(batch, s);
    BOOST_TEST_REQUIRE(static_cast<int64_t>(row.size()) >= vocab);
    out.insert(out.end(), row.begin(), row.begin() + vocab);
  }
  return out;
}

// Plexus's logits from `checkpoint` against transformers' from `hf` on 24 random tokens: within
// 1e-4 of the largest logit; and transformers' loss of predicting each next token against the
// same cross-entropy of Plexus's logits, within 1e-5 relative.
void compare_logits(const fs::path& checkpoint, const fs::path& hf, const fs::path& work) {
  std::mt19937 gen(5);
  std::vector<int32_t> tokens(24);
  for (int32_t& t : tokens) t = static_cast<int32_t>(gen() % 200u);
  int64_t vocab = 0;
  const std::vector<float> ours = plexus_logits(checkpoint, tokens, vocab);

  ck::SafetensorsWriter input;
  input.add("tokens", ck::DType::i32, {1, static_cast<int64_t>(tokens.size())},
            std::as_bytes(std::span<const int32_t>(tokens)));
  input.write(work / "tokens.safetensors");
  const fs::path result = work / "logits.safetensors";
  const auto ran = run_process(quote(hf_python().string()) + " " +
                               quote(std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/hf_logits.py") +
                               " logits " + quote(hf.string()) + " " +
                               quote((work / "tokens.safetensors").string()) + " " + quote(result.string()));
  BOOST_TEST_REQUIRE(ran.status == 0, ran.output);
  const auto file = ck::SafetensorsFile::open(result);
  const ck::TensorView theirs = file.tensor("logits");
  BOOST_TEST_REQUIRE(theirs.bytes.size() == ours.size() * sizeof(float));
  const auto* ref = reinterpret_cast<const float*>(theirs.bytes.data());
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    largest = std::max(largest, std::abs(static_cast<double>(ref[i])));
    worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - ref[i]));
  }
  BOOST_TEST_MESSAGE("largest logit " << largest << ", largest difference " << worst);
  BOOST_TEST(largest > 0.1);
  BOOST_TEST(worst <= 1e-4 * largest);
  // Mean cross-entropy of position s predicting token s + 1, from Plexus's logits, in double.
  double loss = 0;
  const auto n = static_cast<int64_t>(tokens.size());
  for (int64_t s = 0; s + 1 < n; ++s) {
    const float* row = ours.data() + s * vocab;
    double mx = row[0], sum = 0;
    for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
    loss += mx + std::log(sum) - row[tokens[static_cast<std::size_t>(s + 1)]];
  }
  loss /= static_cast<double>(n - 1);
  const double hf_loss = reinterpret_cast<const double*>(file.tensor("loss").bytes.data())[0];
  BOOST_TEST(loss == hf_loss, boost::test_tools::tolerance(1e-5));
}

// Trains, exports, and compares the two sides' logits on 24 random tokens.
void check_export(const std::string& extra, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    TrainCorpus corpus;
    const fs::path run = corpus.dir.path() / "run", hf = corpus.dir.path() / "hf";
    const auto trained = run_process(corpus.train(run.string(), kLlama + " " + extra));
    BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
    const fs::path checkpoint = run / "checkpoints" / "step_00000003";
    const auto exported = run_process(kPlexus + " checkpoint export " + quote(checkpoint.string()) + " " +
                                      quote(hf.string()) + " --format hf");
    BOOST_TEST_REQUIRE(exported.status == 0, exported.output);
    BOOST_TEST(fs::exists(hf / "config.json"));

    compare_logits(checkpoint, hf, corpus.dir.path());
  }
}

// A model trained elsewhere: transformers saves a random `kind` (llama or mixtral; bfloat16, GQA,
// untied); imported, Plexus computes its logits and loss as transformers does, and plexus-train
// continues it with the settings the import prints.
void check_import(const std::string& kind) {
  TrainCorpus corpus;
  const fs::path hf = corpus.dir.path() / "made", imported = corpus.dir.path() / "imported";
  const auto made = run_process(quote(hf_python().string()) + " " +
                                quote(std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/hf_logits.py") +
                                " make " + quote(hf.string()) + " " + kind);
  BOOST_TEST_REQUIRE(made.status == 0, made.output);
  const auto import = run_process(kPlexus + " checkpoint import " + quote(hf.string()) + " " +
                                  quote(imported.string()) + " --format hf");
  BOOST_TEST_REQUIRE(import.status == 0, import.output);
  compare_logits(imported, hf, corpus.dir.path());

  // The printed command, with the data and a short run.
  const std::string marker = "resume it with: plexus-train";
  const std::size_t at = import.output.find(marker);
  BOOST_TEST_REQUIRE(at != std::string::npos, import.output);
  std::string settings = import.output.substr(at + marker.size());
  settings = settings.substr(0, settings.find('\n'));
  const auto trained = run_process(
      std::string(PLEXUS_BUILD_DIR) + "/bin/plexus-train --set data.path=" + quote(corpus.prefix) +
      " --set run.output_dir=" + quote((corpus.dir.path() / "run").string()) +
      " --set train.steps=3 --set train.eval_interval=0 --set sample.tokens=0" + settings);
  BOOST_TEST(trained.status == 0, trained.output);
  BOOST_TEST(trained.output.find("resumed from") != std::string::npos, trained.output);
  // Refusals: an existing OUT, a model Plexus has no GPT for.
  const auto again = run_process(kPlexus + " checkpoint import " + quote(hf.string()) + " " +
                                 quote(imported.string()) + " --format hf");
  BOOST_TEST(again.status != 0);
  BOOST_TEST(again.output.find("exists") != std::string::npos, again.output);
  std::ofstream(corpus.dir.path() / "config.json") << R"({"model_type": "gpt2", "hidden_size": 8})";
  const auto gpt2 = run_process(kPlexus + " checkpoint import " + quote(corpus.dir.path().string()) + " " +
                                quote((corpus.dir.path() / "m").string()) + " --format hf");
  BOOST_TEST(gpt2.status != 0);
  BOOST_TEST(gpt2.output.find("\"gpt2\"") != std::string::npos, gpt2.output);
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(has_transformers(),
                          "no transformers: the venv of scripts/python-env.sh (PLEXUS_HF_VENV "
                          "or <repo>/.venv-hf) cannot import LlamaForCausalLM")

BOOST_AUTO_TEST_CASE(a_tied_llama_gives_transformers_the_same_logits) {
  check_export("", "tied");
}

// Untied output layer, the vocabulary padded to 288 rows (the export keeps the 256 real ones), and
// Transformer Engine names for the pre-norms.
BOOST_AUTO_TEST_CASE(an_untied_padded_te_named_llama_too) {
  check_export(
      "--set model.untie_embeddings_and_output_weights=true --set model.make_vocab_size_divisible_by=96 "
      "--set checkpoint.names=te",
      "untied, padded, te names");
}

// Every MLP an MoE layer routed as Mixtral routes (softmax after the top 2 of 4 experts, the
// default): transformers' MixtralForCausalLM, with TEGroupedMLP's expert names read too.
BOOST_AUTO_TEST_CASE(an_all_moe_gpt_is_mixtral) {
  const std::string moe =
      "--set model.moe.layer_freq=1"
      R"( --set 'model.moe.options={"num_moe_experts": 4, "moe_router_topk": 2, )"
      R"("moe_ffn_hidden_size": 24, "moe_aux_loss_coeff": 0.01, "moe_grouped_gemm": true}')";
  check_export(moe, "mixtral");
  check_export(moe + " --set checkpoint.names=te", "mixtral, te names");
}

BOOST_AUTO_TEST_CASE(what_llama_cannot_hold_is_refused_naming_it) {
  TrainCorpus corpus;
  const fs::path run = corpus.dir.path() / "run";
  const auto trained =
      run_process(corpus.train(run.string(), "--set train.steps=1 --set checkpoint.interval=1"));
  BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
  const auto gelu = run_process(kPlexus + " checkpoint export " + quote(run.string()) + " " +
                                quote((corpus.dir.path() / "hf").string()) + " --format hf");
  BOOST_TEST(gelu.status != 0);
  BOOST_TEST(gelu.output.find("model.activation") != std::string::npos, gelu.output);
  BOOST_TEST(!fs::exists(corpus.dir.path() / "hf"));
  // An existing output directory is not written into.
  fs::create_directories(corpus.dir.path() / "taken");
  const auto taken = run_process(kPlexus + " checkpoint export " + quote(run.string()) + " " +
                                 quote((corpus.dir.path() / "taken").string()) + " --format hf");
  BOOST_TEST(taken.status != 0);
  BOOST_TEST(taken.output.find("exists") != std::string::npos, taken.output);
  const auto format = run_process(kPlexus + " checkpoint export " + quote(run.string()) + " " +
                                  quote((corpus.dir.path() / "x").string()) + " --format onnx");
  BOOST_TEST(format.status != 0);
  BOOST_TEST(format.output.find("expected hf") != std::string::npos, format.output);
  // Dense and MoE layers mixed: neither Llama nor Mixtral.
  const fs::path mixed = corpus.dir.path() / "mixed";
  const auto trained_mixed = run_process(corpus.train(
      mixed.string(),
      kLlama + R"( --set model.moe.layer_freq=2 --set 'model.moe.options={"num_moe_experts": 2}')"));
  BOOST_TEST_REQUIRE(trained_mixed.status == 0, trained_mixed.output);
  const auto both = run_process(kPlexus + " checkpoint export " + quote(mixed.string()) + " " +
                                quote((corpus.dir.path() / "hf_mixed").string()) + " --format hf");
  BOOST_TEST(both.status != 0);
  BOOST_TEST(both.output.find("model.moe.layer_freq") != std::string::npos, both.output);
}

BOOST_AUTO_TEST_CASE(a_transformers_llama_imports_and_trains_on) {
  check_import("llama");
}

// Mixtral: every MLP an MoE layer of 4 experts, 2 per token, routed alike on both sides.
BOOST_AUTO_TEST_CASE(a_transformers_mixtral_imports_and_trains_on) {
  check_import("mixtral");
}

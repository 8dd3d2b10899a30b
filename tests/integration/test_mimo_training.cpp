// MIMO training on one process (configs/mimo_digits.json, docs/mimo.md): a vision encoder and a
// language model trained together on scikit-learn's digits name held-out digits (>= 95%), where
// the same language model with the encoder's outputs zeroed does no better than the class prior;
// the checkpoint holds every module under Megatron's names; a run stopped at step 10 and resumed
// ends bit for bit where an uninterrupted one does; bad module configs are refused by name.
#define BOOST_TEST_MODULE mimo_training
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <chrono>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "digits_data.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_comparison.hpp"
#include "skip_module.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace plexus::test;

PLEXUS_SKIP_MODULE_UNLESS(
    digits_csv().has_value(),
    "needs scikit-learn's digits.csv.gz (scripts/fetch-digits.sh build/data extracts it)")

namespace {

struct Data {
  TempDir dir;
  fs::path prefix = digits_dataset(dir.path());
};
Data& data() {
  static Data d;
  return d;
}

// The last "eval" record of a run.
boost::json::object last_eval(const fs::path& out) {
  std::ifstream in(out / "metrics.jsonl");
  boost::json::object last;
  for (std::string line; std::getline(in, line);) {
    boost::json::value record = boost::json::parse(line);
    if (record.at("event") == "eval") last = record.as_object();
  }
  return last;
}

ProcessResult train(const fs::path& out, const std::string& extra) {
  return run_process(kOneThread + mimo_train_command(data().prefix, out, extra));
}

}  // namespace

// The proof task: the held-out digits named from the image; without it, the class prior.
BOOST_AUTO_TEST_CASE(names_held_out_digits_from_the_image) {
  TempDir out;
  const auto run = train(out.path() / "mimo", "");
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  const boost::json::object e = last_eval(out.path() / "mimo");
  const double accuracy = e.at("val_accuracy").to_number<double>();
  BOOST_TEST_MESSAGE("held-out accuracy " << accuracy << ", val_loss " << e.at("val_loss"));
  BOOST_TEST(accuracy >= 0.95);
  BOOST_TEST(e.at("val_samples").to_number<int64_t>() == 352);

  const auto ablated = train(out.path() / "text", "--set mimo.zero_modalities=true");
  BOOST_TEST_REQUIRE(ablated.status == 0, ablated.output);
  const double prior = last_eval(out.path() / "text").at("val_accuracy").to_number<double>();
  BOOST_TEST_MESSAGE("with the image zeroed: " << prior);
  // Ten classes of 29 to 43 of these 352 held-out samples: text alone can reach the largest
  // class's share (12.2%), no more.
  BOOST_TEST(prior <= 0.13);

  // Megatron's names: modality_submodules.<m>.encoders.<e>..., ...input_projections.0...,
  // language_model...
  const auto saved =
      plexus::checkpoint::load_checkpoint(out.path() / "mimo" / "checkpoints" / step_dir(1500));
  for (const char* name :
       {"modality_submodules.images.encoders.clip_encoder.conv1.weight",
        "modality_submodules.images.encoders.clip_encoder.position_embeddings.weight",
        "modality_submodules.images.encoders.clip_encoder.decoder.layers.0.self_attention.linear_qkv.weight",
        "modality_submodules.images.input_projections.0.encoder.linear_fc1.weight",
        "modality_submodules.images.input_projections.0.encoder.linear_fc2.bias",
        "language_model.embedding.word_embeddings.weight", "language_model.decoder.final_layernorm.weight"})
    BOOST_TEST(saved.model.contains(name), name);
  for (const std::string& name : saved.model.names())
    BOOST_TEST((name.rfind("language_model.", 0) == 0 || name.rfind("modality_submodules.images.", 0) == 0),
               name);
  BOOST_TEST(saved.optimizer.contains("language_model.embedding.word_embeddings.weight.exp_avg"));
}

// Stopped by train.exit_interval at step 10 and resumed: the same losses and, bit for bit, the
// same weights and moments at step 20 as a run that never stopped.
BOOST_AUTO_TEST_CASE(resumes_exactly) {
  TempDir out;
  const std::string twenty = "--set train.steps=20 --set train.eval_interval=0";
  BOOST_TEST_REQUIRE(train(out.path() / "whole", twenty).status == 0);
  const auto first = train(out.path() / "parts", twenty + " --set train.exit_interval=10");
  BOOST_TEST_REQUIRE(first.status == 0, first.output);
  BOOST_TEST(first.output.find("exited (train.exit_interval): 10 steps") != std::string::npos, first.output);
  const auto second = train(out.path() / "parts", twenty + " --resume latest");
  BOOST_TEST_REQUIRE(second.status == 0, second.output);
  const RunDifference d = compare_runs(out.path() / "whole", out.path() / "parts", 20);
  BOOST_TEST(d.losses == 0.0);
  BOOST_TEST(d.weights == 0.0);
  BOOST_TEST(d.moments == 0.0);
}

// SIGTERM: the run stops after the step it is in, with a checkpoint of it and an "interrupted"
// record, exit status 75; --resume latest continues from there.
BOOST_AUTO_TEST_CASE(a_stop_signal_checkpoints_and_resumes) {
  TempDir out;
  const fs::path run = out.path() / "run";
  BackgroundJob job(
      mimo_train_command(data().prefix, run, "--set train.steps=1000000 --set train.eval_interval=0"),
      out.path() / "log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (step_losses(run / "metrics.jsonl").size() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BOOST_TEST_REQUIRE(::kill(job.pid(), SIGTERM) == 0);
  const std::optional<int> status = job.wait_for(std::chrono::seconds(60));
  BOOST_TEST_REQUIRE(status.has_value());
  BOOST_TEST(*status == 75, job.output());
  const std::vector<double> losses = step_losses(run / "metrics.jsonl");
  const auto stopped = static_cast<int>(losses.size());
  BOOST_TEST(
      job.output().find("stopped by SIGTERM after step " + std::to_string(stopped)) != std::string::npos,
      job.output());
  BOOST_TEST(fs::exists(run / "checkpoints" / step_dir(stopped) / "COMPLETE"));
  const auto resumed = train(run, "--set train.steps=" + std::to_string(stopped + 3) +
                                      " --set train.eval_interval=0 --resume latest");
  BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
  BOOST_TEST(step_losses(run / "metrics.jsonl").size() == losses.size() + 3);
}

// The language model may be any stack: a hybrid Mamba-2/attention pattern trains under MIMO, its
// Mamba mixers under language_model.decoder.layers.N.mixer (Megatron's hybrid names).
BOOST_AUTO_TEST_CASE(a_hybrid_language_model) {
  TempDir out;
  const auto run = train(out.path() / "hybrid",
                         "--set model.pattern=M*M- --set model.num_layers=4 --set " +
                             quote("model.mamba.options={\"mamba_head_dim\": 16, \"mamba_num_groups\": 2}") +
                             " --set train.steps=20 --set train.eval_interval=0");
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  const std::vector<double> losses = step_losses(out.path() / "hybrid" / "metrics.jsonl");
  BOOST_TEST_REQUIRE(losses.size() == 20u);
  BOOST_TEST(losses.back() < losses.front());
  const auto saved =
      plexus::checkpoint::load_checkpoint(out.path() / "hybrid" / "checkpoints" / step_dir(20));
  BOOST_TEST(saved.model.contains("language_model.decoder.layers.0.mixer.in_proj.weight"));
  BOOST_TEST(saved.model.contains("language_model.decoder.layers.1.self_attention.linear_qkv.weight"));
}

BOOST_AUTO_TEST_CASE(bad_module_configs_are_refused_by_name) {
  TempDir out;
  struct Case {
    std::string set, message;
  };
  const std::vector<Case> cases{
      {"--set mimo.modules[0].special_token_id=4", "mimo.modules[0].special_token_id: 4, but " +
                                                       data().prefix.string() +
                                                       " puts the image's embeddings at token 3"},
      {"--set mimo.modules[0].model.hiden_size=32", "mimo.modules[0].model: unknown key 'hiden_size'"},
      {"--set " + quote("mimo.modules[0].model.head={\"component\": \"transformer.lm_head\"}"),
       "mimo.modules[0].model.head.component: an encoder's head must hand its output on"},
      {"--set mimo.modules[0].model.embedding.options.patch_size=3", "patch_size"},
      {"--set mimo.modules[0].name=language", "mimo.modules[0].name: 'language' cannot name a modality"},
      {"--set data.path=" + (out.path() / "absent").string(), "absent.mimo.json: no such file"},
      {"--set train.profile=true", "train.profile: a MIMO run has no step profile yet; train.trace records"},
  };
  for (const Case& c : cases) {
    const auto run = train(out.path() / "refused", c.set + " --set train.steps=2");
    BOOST_TEST(run.status == 1, c.set << ":\n" << run.output);
    BOOST_TEST(run.output.find(c.message) != std::string::npos, c.set << ":\n" << run.output);
  }
}

// plexus-train refuses bad input with a message that names the thing at fault, exits non-zero and
// leaves no checkpoint behind: a diverging run, data that cannot be trained on, a damaged
// checkpoint. (Config errors: test_cli.cpp; resume refusals: test_trainer_resume.cpp.)
#define BOOST_TEST_MODULE trainer_errors
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "plexus/core/device.hpp"
#include "run_process.hpp"
#include "train_corpus.hpp"

using plexus::test::kBin;
using plexus::test::quote;
using plexus::test::run_process;
using plexus::test::TrainCorpus;

namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_diverging_run_stops_naming_the_first_layer_and_saves_nothing) {
  TrainCorpus corpus;
  const auto out = corpus.dir.path() / "run";
  // A learning rate of 1e12 makes the first update blow the weights up; the second forward
  // produces infinities in the first sublayer that multiplies them.
  const auto run =
      run_process(corpus.train(out.string(), "--set optimizer.lr=1e12 --set optimizer.lr_warmup_steps=0"));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(contains(run.output, "non-finite"), run.output);
  BOOST_TEST(contains(run.output, "decoder.layers.0"), run.output);
  BOOST_TEST(!fs::exists(out / "checkpoints" / "step_00000020"), "a diverged run must not checkpoint");
}

BOOST_AUTO_TEST_CASE(a_dataset_shorter_than_one_sequence_is_refused_with_its_sizes) {
  plexus::test::TempDir dir;
  const auto text = dir.write("tiny.txt", "hi there\n");
  const auto prefix = (dir.path() / "tiny").string();
  BOOST_TEST_REQUIRE(run_process(kBin + "plexus data prepare --input " + quote(text.string()) +
                                 " --output-prefix " + quote(prefix))
                         .status == 0);
  const auto run = run_process(kBin + "plexus-train --set data.path=" + quote(prefix) +
                               " --set run.output_dir=" + quote((dir.path() / "run").string()));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(contains(run.output, prefix), run.output);
  BOOST_TEST(contains(run.output, "seq_length"), run.output);
  BOOST_TEST(!fs::exists(dir.path() / "run" / "checkpoints"));
}

BOOST_AUTO_TEST_CASE(a_dataset_with_a_bad_header_is_named) {
  TrainCorpus corpus;
  // Overwrite the index's magic: a file that is not a Megatron indexed dataset.
  {
    std::fstream idx(corpus.prefix + ".idx", std::ios::in | std::ios::out | std::ios::binary);
    idx.write("NOTANIDX", 8);
  }
  const auto run = run_process(corpus.train((corpus.dir.path() / "run").string(), ""));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(contains(run.output, corpus.prefix + ".idx"), run.output);
  BOOST_TEST(contains(run.output, "MMIDIDX"), run.output);
}

BOOST_AUTO_TEST_CASE(a_truncated_checkpoint_file_is_refused_naming_the_file) {
  TrainCorpus corpus;
  const auto out = corpus.dir.path() / "run";
  BOOST_TEST_REQUIRE(run_process(corpus.train(out.string(), "--set train.steps=2")).status == 0);
  const auto model = out / "checkpoints" / "step_00000002" / "model.safetensors";
  BOOST_TEST_REQUIRE(fs::exists(model));
  const auto size = fs::file_size(model);
  fs::resize_file(model, size / 2);
  const auto resumed = run_process(corpus.train(out.string(), "--set train.steps=4 --resume latest"));
  BOOST_TEST(resumed.status == 1, resumed.output);
  BOOST_TEST(contains(resumed.output, model.string()), resumed.output);
  BOOST_TEST(contains(resumed.output, std::to_string(size)), resumed.output);
  BOOST_TEST(!fs::exists(out / "checkpoints" / "step_00000004"),
             "nothing may be written after a refused resume");
}

BOOST_AUTO_TEST_CASE(resume_latest_without_a_checkpoint_is_an_error) {
  TrainCorpus corpus;
  const auto out = corpus.dir.path() / "empty";
  const auto run = run_process(corpus.train(out.string(), "--resume latest"));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(contains(run.output, "no complete checkpoint"), run.output);
  BOOST_TEST(contains(run.output, (out / "checkpoints").string()), run.output);
}

BOOST_AUTO_TEST_CASE(bf16_on_the_cpu_is_refused_naming_the_key) {
  TrainCorpus corpus;
  const auto out = corpus.dir.path() / "bf16";
  const auto run = run_process(corpus.train(out.string(), "--set run.precision=\\\"bf16\\\""));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(contains(run.output, "run.precision"), run.output);
  BOOST_TEST(contains(run.output, "needs a CUDA device"), run.output);
  BOOST_TEST(contains(run.output, "cpu"), run.output);
  const auto typo = run_process(corpus.train(out.string(), "--set run.precision=\\\"fp16\\\""));
  BOOST_TEST(typo.status == 1, typo.output);
  BOOST_TEST(contains(typo.output, "run.precision"), typo.output);
  BOOST_TEST(contains(typo.output, "fp16"), typo.output);
  BOOST_TEST(!fs::exists(out / "checkpoints"));
  BOOST_TEST(!fs::exists(out / "metrics.jsonl"));
}

BOOST_AUTO_TEST_CASE(a_device_that_is_not_here_is_named) {
  TrainCorpus corpus;
  const auto out = corpus.dir.path() / "gpu";
  const auto unknown = run_process(corpus.train(out.string(), "--set run.device=\\\"tpu\\\""));
  BOOST_TEST(unknown.status == 1, unknown.output);
  BOOST_TEST(contains(unknown.output, "run.device"), unknown.output);
  BOOST_TEST(contains(unknown.output, "\"tpu\""), unknown.output);
  if (plexus::device::cuda_device_count() == 0) {  // this machine: say why cuda cannot be used
    const auto cuda = run_process(corpus.train(out.string(), "--set run.device=\\\"cuda\\\""));
    BOOST_TEST(cuda.status == 1, cuda.output);
    BOOST_TEST(contains(cuda.output, "run.device"), cuda.output);
    BOOST_TEST((contains(cuda.output, "no CUDA GPU") || contains(cuda.output, "no CUDA support")),
               cuda.output);
  }
  BOOST_TEST(!fs::exists(out / "checkpoints"));
}

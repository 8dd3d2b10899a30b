// plexus-train as a user runs it: prepare a corpus, train, checkpoint, resume. 20 steps straight
// and 10 + resume + 10 give bit-identical losses (every random number is counter-based and the
// data position is a function of the step). A half-written checkpoint is never resumed.
#define BOOST_TEST_MODULE trainer_resume
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "run_process.hpp"
#include "temp_dir.hpp"

using plexus::test::quote;
using plexus::test::run_process;

namespace {

const std::string kBin = std::string(PLEXUS_BUILD_DIR) + "/bin/";

std::vector<double> step_losses(const std::filesystem::path& metrics) {
  std::vector<double> losses;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto record = boost::json::parse(line).as_object();
    if (record.at("event") == "step") losses.push_back(record.at("loss").as_double());
  }
  return losses;
}

struct Corpus {
  plexus::test::TempDir dir;
  std::string prefix;
  Corpus() {
    std::string text;
    for (int i = 0; i < 400; ++i)
      text += "The quick brown fox " + std::to_string(i) + " jumps over the lazy dog.\n\n";
    const auto file = dir.write("corpus.txt", text);
    prefix = (dir.path() / "corpus").string();
    const auto prepared =
        run_process(kBin + "plexus data prepare --input " + quote(file.string()) + " --output-prefix " + quote(prefix));
    BOOST_TEST_REQUIRE(prepared.status == 0, prepared.output);
  }
  std::string train(const std::string& out, const std::string& extra) const {
    return kBin + "plexus-train --set data.path=" + quote(prefix) + " --set run.output_dir=" + quote(out) +
           " --set model.num_layers=2 --set model.hidden_size=32 --set model.seq_length=32"
           " --set train.micro_batch_size=4 --set train.microbatches=2 --set train.steps=20"
           " --set train.eval_interval=0 --set sample.tokens=8 " +
           extra;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(resume_continues_bit_identically) {
  Corpus corpus;
  const auto straight = corpus.dir.path() / "straight";
  const auto split = corpus.dir.path() / "split";
  const auto a = run_process(corpus.train(straight.string(), ""));
  BOOST_TEST_REQUIRE(a.status == 0, a.output);
  BOOST_TEST(a.output.find("val_loss") != std::string::npos, a.output);
  // First half: 10 steps of a 20-step schedule (same learning rates), checkpoint at 10.
  const auto first = run_process(corpus.train(split.string(), "--set checkpoint.interval=10"));
  BOOST_TEST_REQUIRE(first.status == 0, first.output);
  std::vector<double> losses = step_losses(split / "metrics.jsonl");
  losses.resize(10);
  std::filesystem::remove(split / "metrics.jsonl");
  std::filesystem::remove_all(split / "checkpoints" / "step_00000020");
  const auto second = run_process(corpus.train(split.string(), "--resume " + quote((split / "checkpoints" / "step_00000010").string())));
  BOOST_TEST_REQUIRE(second.status == 0, second.output);
  for (double l : step_losses(split / "metrics.jsonl")) losses.push_back(l);
  const std::vector<double> expected = step_losses(straight / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == 20U);
  BOOST_TEST(losses == expected, boost::test_tools::per_element());  // exact, not approximate
  BOOST_TEST(expected.back() < expected.front());
}

BOOST_AUTO_TEST_CASE(existing_checkpoints_are_not_overwritten_and_partial_ones_are_refused) {
  Corpus corpus;
  const auto out = corpus.dir.path() / "run";
  BOOST_TEST_REQUIRE(run_process(corpus.train(out.string(), "--set train.steps=2")).status == 0);
  const auto again = run_process(corpus.train(out.string(), "--set train.steps=2"));
  BOOST_TEST(again.status == 1);
  BOOST_TEST(again.output.find("--resume latest") != std::string::npos, again.output);
  // A checkpoint whose COMPLETE marker is missing was being written when a run stopped.
  const auto ckpt = out / "checkpoints" / "step_00000002";
  std::filesystem::remove(ckpt / "COMPLETE");
  const auto partial = run_process(corpus.train(out.string(), "--set train.steps=4 --resume " + quote(ckpt.string())));
  BOOST_TEST(partial.status == 1);
  BOOST_TEST(partial.output.find("COMPLETE") != std::string::npos, partial.output);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_another_model_is_refused_naming_the_key) {
  Corpus corpus;
  const auto out = corpus.dir.path() / "run";
  BOOST_TEST_REQUIRE(run_process(corpus.train(out.string(), "--set train.steps=2")).status == 0);
  const auto other = run_process(corpus.train((corpus.dir.path() / "other").string(),
                                              "--set train.steps=4 --set model.hidden_size=16 --resume " +
                                                  quote((out / "checkpoints" / "step_00000002").string())));
  BOOST_TEST(other.status == 1);
  BOOST_TEST(other.output.find("model.hidden_size") != std::string::npos, other.output);
}

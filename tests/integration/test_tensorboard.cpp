// train.tensorboard_dir: plexus-train writes TensorBoard event files, read back by TensorBoard's
// own reader (tests/reference/tensorboard_read.py in the venv of scripts/python-env.sh): every
// step's loss, learning rate, gradient norm, tokens/s and MFU, the validation losses and the text
// samples, equal to metrics.jsonl's values (to float32, the type of TensorBoard's scalars); and a
// directory that cannot be made is refused naming the key; a MIMO run's language-model loss,
// validation loss and accuracy likewise. Without the venv the module reports itself skipped (and
// the MIMO case without scikit-learn's digits). (The framing's CRC-32C:
// tests/unit/test_tensorboard_writer.cpp.)
#define BOOST_TEST_MODULE tensorboard
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "digits_data.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "train_corpus.hpp"
#include "venv_python.hpp"

using plexus::test::quote;
using plexus::test::run_process;
using plexus::test::TrainCorpus;
namespace fs = std::filesystem;

namespace {

fs::path venv_python() {
  return plexus::test::venv_python("PLEXUS_VENV", ".venv");
}

bool has_reader() {
  return plexus::test::python_runs(venv_python(),
                                   "from tensorboard.backend.event_processing import event_accumulator");
}

std::vector<boost::json::object> records(const fs::path& file, const std::string& event) {
  std::vector<boost::json::object> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    boost::json::object r = boost::json::parse(line).as_object();
    if (r.at("event").as_string() == event) out.push_back(std::move(r));
  }
  return out;
}

// The value TensorBoard holds: a float32.
double as_float(double v) {
  return static_cast<double>(static_cast<float>(v));
}

// a == b up to the last bits of a double: Boost.JSON 1.81 parses decimal text to within an ulp,
// not always to the nearest double; a float32 rounding difference would be 1e-8 relative or more.
bool same(double a, double b) {
  return std::abs(a - b) <= 1e-12 * std::abs(b);
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(has_reader(),
                          "no TensorBoard reader: the venv of scripts/python-env.sh "
                          "(PLEXUS_VENV or <repo>/.venv) cannot import tensorboard")

BOOST_AUTO_TEST_CASE(tensorboard_reads_what_the_run_wrote) {
  TrainCorpus corpus;
  const fs::path out = corpus.dir.path() / "run", logs = corpus.dir.path() / "tb";
  const auto run = run_process(corpus.train(
      out.string(),
      "--set train.steps=4 --set train.eval_interval=2 --set train.eval_iters=1 --set sample.tokens=12 "
      "--set train.peak_tflops=0.5 --set train.tensorboard_dir=" +
          quote(logs.string())));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  BOOST_TEST(run.output.find("MFU") != std::string::npos, run.output);
  const auto read =
      run_process(quote(venv_python().string()) + " " +
                  quote(std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/tensorboard_read.py") + " " +
                  quote(logs.string()));
  BOOST_TEST_REQUIRE(read.status == 0, read.output);
  const boost::json::object board = boost::json::parse(read.output).as_object();
  const boost::json::object& scalars = board.at("scalars").as_object();

  const auto steps = records(out / "metrics.jsonl", "step");
  BOOST_TEST_REQUIRE(steps.size() == 4u);
  for (const char* tag : {"loss", "lr", "grad_norm", "tokens_per_s", "gflops_per_s", "mfu"}) {
    BOOST_TEST_CONTEXT(tag) {
      BOOST_TEST_REQUIRE(scalars.contains(tag));
      const boost::json::array& points = scalars.at(tag).as_array();
      BOOST_TEST_REQUIRE(points.size() == steps.size());
      for (std::size_t i = 0; i < steps.size(); ++i) {
        BOOST_TEST(points[i].as_array()[0].to_number<int64_t>() == steps[i].at("step").to_number<int64_t>());
        BOOST_TEST(same(points[i].as_array()[1].to_number<double>(),
                        as_float(steps[i].at(tag).to_number<double>())));
      }
    }
  }
  const auto evals = records(out / "metrics.jsonl", "eval");
  BOOST_TEST_REQUIRE(evals.size() == 2u);
  const boost::json::array& val = scalars.at("val_loss").as_array();
  BOOST_TEST_REQUIRE(val.size() == 2u);
  for (std::size_t i = 0; i < evals.size(); ++i) {
    BOOST_TEST(val[i].as_array()[0].to_number<int64_t>() == evals[i].at("step").to_number<int64_t>());
    BOOST_TEST(same(val[i].as_array()[1].to_number<double>(),
                    as_float(evals[i].at("val_loss").to_number<double>())));
  }
  // The samples, one per evaluation, as Markdown code blocks.
  const boost::json::array& samples = board.at("texts").as_object().at("sample").as_array();
  BOOST_TEST_REQUIRE(samples.size() == 2u);
  for (const auto& s : samples) {
    const std::string text(s.as_array()[1].as_string());
    BOOST_TEST(text.size() > 4u);
    BOOST_TEST(text.starts_with("    "));
  }
}

BOOST_AUTO_TEST_CASE(an_unusable_directory_is_refused_naming_the_key) {
  TrainCorpus corpus;
  const fs::path file = corpus.dir.path() / "a_file";
  std::ofstream(file) << "not a directory";
  const auto run = run_process(
      corpus.train((corpus.dir.path() / "run").string(),
                   "--set train.steps=1 --set train.tensorboard_dir=" + quote((file / "tb").string())));
  BOOST_TEST(run.status != 0);
  BOOST_TEST(run.output.find("train.tensorboard_dir") != std::string::npos, run.output);
}

// A MIMO run (configs/mimo_digits.json) writes the same: the language model's loss every step, its
// validation loss and the held-out accuracy at every evaluation.
// Reported skipped (not passed) without scikit-learn's digits (scripts/fetch-digits.sh build/data).
boost::test_tools::assertion_result have_digits(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result ok(plexus::test::digits_csv().has_value());
  ok.message() << "needs scikit-learn's digits.csv.gz (scripts/fetch-digits.sh build/data)";
  return ok;
}

BOOST_AUTO_TEST_CASE(a_mimo_run_writes_its_numbers, *boost::unit_test::precondition(have_digits)) {
  const plexus::test::TempDir dir;
  const fs::path prefix = plexus::test::digits_dataset(dir.path());
  const fs::path out = dir.path() / "run", logs = dir.path() / "tb";
  const auto run = run_process(plexus::test::mimo_train_command(
      prefix, out,
      "--set train.steps=6 --set train.eval_interval=3 --set train.tensorboard_dir=" + quote(logs.string())));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  const auto read =
      run_process(quote(venv_python().string()) + " " +
                  quote(std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/tensorboard_read.py") + " " +
                  quote(logs.string()));
  BOOST_TEST_REQUIRE(read.status == 0, read.output);
  const boost::json::object scalars = boost::json::parse(read.output).as_object().at("scalars").as_object();
  const auto check = [&](const char* tag, const std::vector<boost::json::object>& expected) {
    BOOST_TEST_CONTEXT(tag) {
      BOOST_TEST_REQUIRE(scalars.contains(tag));
      const boost::json::array& points = scalars.at(tag).as_array();
      BOOST_TEST_REQUIRE(points.size() == expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        BOOST_TEST(points[i].as_array()[0].to_number<int64_t>() ==
                   expected[i].at("step").to_number<int64_t>());
        BOOST_TEST(same(points[i].as_array()[1].to_number<double>(),
                        as_float(expected[i].at(tag).to_number<double>())));
      }
    }
  };
  const auto steps = records(out / "metrics.jsonl", "step");
  BOOST_TEST_REQUIRE(steps.size() == 6u);
  check("loss", steps);
  const auto evals = records(out / "metrics.jsonl", "eval");
  BOOST_TEST_REQUIRE(evals.size() == 2u);
  check("val_loss", evals);
  check("val_accuracy", evals);
}

// Megatron's data options mean the same here: for the same files and data config (a dataset or a
// weighted or unweighted blend, the split string, sequence length, seed and sample counts),
// `plexus data samples --json` serves the same token ids, sample for sample, as megatron-core's
// own BlendedMegatronDatasetBuilder and GPTDataset (tests/reference/megatron_gpt_dataset.py),
// in the training and the validation split, over one epoch and several. Needs megatron-core in
// <repo>/.venv-hf (scripts/python-env.sh; PLEXUS_HF_VENV elsewhere); skipped without it.
#define BOOST_TEST_MODULE megatron_data
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <string>

#include "run_process.hpp"
#include "skip_module.hpp"
#include "temp_dir.hpp"
#include "venv_python.hpp"

using plexus::test::quote;
using plexus::test::run_process;
namespace fs = std::filesystem;

namespace {

const std::string kPlexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus";
const std::string kScript = std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/megatron_gpt_dataset.py";

fs::path megatron_python() {
  return plexus::test::venv_python("PLEXUS_HF_VENV", ".venv-hf");
}

bool has_megatron() {
  return plexus::test::python_runs(megatron_python(),
                                   "import importlib.util, sys; "
                                   "sys.exit(importlib.util.find_spec(\"megatron\") is None)");
}

// `documents` paragraphs of 3 to 40 words, each naming its corpus and number.
std::string prepare(const plexus::test::TempDir& dir, const std::string& name, int documents) {
  std::string text;
  for (int d = 0; d < documents; ++d) {
    text += name + " document " + std::to_string(d) + ":";
    for (int w = 0; w < 3 + (d * 7) % 38; ++w) text += " word" + std::to_string((d + w) % 11);
    text += "\n\n";
  }
  const fs::path file = dir.write(name + ".txt", text);
  const std::string prefix = (dir.path() / name).string();
  const auto prepared = run_process(kPlexus + " data prepare --input " + quote(file.string()) +
                                    " --output-prefix " + quote(prefix));
  BOOST_TEST_REQUIRE(prepared.status == 0, prepared.output);
  return prefix;
}

struct Case {
  std::string path;  // data.path as JSON
  std::string split;
  int64_t seq_length, seed, steps, micro_batch, eval_iters;
};

boost::json::object plexus_samples(const Case& c, const std::string& split, int first) {
  const auto run = run_process(
      kPlexus + " data samples --json --split " + split + " --first " + std::to_string(first) + " --set " +
      quote("data.path=" + c.path) + " --set data.split=" + quote(c.split) +
      " --set model.seq_length=" + std::to_string(c.seq_length) +
      " --set run.seed=" + std::to_string(c.seed) + " --set train.steps=" + std::to_string(c.steps) +
      " --set train.micro_batch_size=" + std::to_string(c.micro_batch) +
      " --set train.eval_iters=" + std::to_string(c.eval_iters) + " --set data.cache_path=" + quote(""));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  return boost::json::parse(run.output).as_object().at(split).as_object();
}

boost::json::object megatron_samples(const Case& c, const std::string& split, int first,
                                     const fs::path& cwd) {
  const auto run = run_process(
      "cd " + quote(cwd.string()) + " && " + quote(megatron_python().string()) + " " + quote(kScript) +
      " --blend " + quote(c.path) + " --split " + quote(c.split) + " --seq-length " +
      std::to_string(c.seq_length) + " --seed " + std::to_string(c.seed) + " --sizes " +
      std::to_string(c.steps * c.micro_batch) + " " + std::to_string(c.eval_iters * c.micro_batch) +
      " 1 --first " + std::to_string(first) + " --split-name " + split);
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  return boost::json::parse(run.output.substr(run.output.rfind("\n{") + 1)).as_object();
}

void expect_same(const Case& c, const fs::path& cwd) {
  for (const std::string split : {"train", "valid"}) {
    const int first = split == "train" ? 200 : 40;
    const boost::json::object ours = plexus_samples(c, split, first);
    const boost::json::object theirs = megatron_samples(c, split, first, cwd);
    BOOST_TEST_CONTEXT(c.path << " split " << c.split << ", " << split) {
      BOOST_TEST(ours.at("size").as_int64() == theirs.at("size").as_int64());
      const auto& a = ours.at("samples").as_array();
      const auto& b = theirs.at("samples").as_array();
      BOOST_TEST_REQUIRE(a.size() == b.size());
      BOOST_TEST(a.size() > 0U);
      for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i], "sample " << i);
    }
  }
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(has_megatron(), "needs megatron-core in .venv-hf (scripts/python-env.sh)")

BOOST_AUTO_TEST_CASE(same_samples_as_megatron_core) {
  plexus::test::TempDir dir;
  const std::string a = prepare(dir, "alpha", 1000), b = prepare(dir, "beta", 600);
  const fs::path cwd = dir.path();
  // One dataset, Megatron's default split, one epoch of the training share.
  expect_same({"\"" + a + "\"", "969,30,1", 32, 1234, 20, 8, 4}, cwd);
  // More samples than an epoch holds: several epochs, the last one shuffled apart.
  expect_same({"\"" + a + "\"", "90,10,0", 24, 7, 800, 16, 8}, cwd);
  // A weighted blend (weights as numbers and as strings), and an unweighted one.
  expect_same({"[0.3, \"" + a + "\", 0.7, \"" + b + "\"]", "90,10,0", 32, 1234, 50, 8, 4}, cwd);
  expect_same({"[\"1\", \"" + a + "\", \"3\", \"" + b + "\"]", "80,20,0", 16, 99, 1000, 8, 4}, cwd);
  expect_same({"[\"" + a + "\", \"" + b + "\"]", "95,5,0", 32, 5, 20, 8, 4}, cwd);
}

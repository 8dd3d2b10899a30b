// The mHC projection phi in checkpoints: written in Megatron's layout [n*n + 2n, n*C] with the
// layout key in the metadata; checkpoints of the earlier layout [n*C, n*n + 2n] (no key) resume
// bit for bit with a one-line notice, including when C = n + 2 makes both shapes the same and
// only the key tells them apart.
#define BOOST_TEST_MODULE mhc_checkpoint_layout
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_edit.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/checkpoint/stored_tensor.hpp"
#include "run_process.hpp"
#include "train_corpus.hpp"

using plexus::test::quote;
using plexus::test::run_process;
using plexus::test::step_losses;
using plexus::test::TrainCorpus;

namespace ck = plexus::checkpoint;
namespace fs = std::filesystem;

namespace {

const std::string kMhc =
    R"( --set mhc.enabled=true --set 'plugins.load=["sequential_scheduler","transformer","mhc_native"]')";
const std::string kPhi0 = "decoder.layers.0.self_attention_hyper_connection.mapping_proj.weight";
const std::string kNotice = "the layout of checkpoints written before";

std::size_t count_lines_with(const std::string& text, const std::string& part) {
  std::size_t lines = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size()))
    ++lines;
  return lines;
}

// Rewrites both files of a checkpoint as checkpoints were written before the layout key: phi and
// its moments as held in memory, no key.
void to_earlier_layout(const fs::path& dir) {
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    plexus::test::rewrite_checkpoint_file(dir, file, [](plexus::test::EditableFile& f) {
      BOOST_TEST_REQUIRE(f.metadata.erase(ck::kLinearLayoutKey) == 1u);
      std::size_t transposed = 0;
      for (auto& [name, tensor] : f.tensors)
        if (ck::stored_transposed(name)) {
          f.transpose(name);
          ++transposed;
        }
      BOOST_TEST_REQUIRE(transposed > 0u);
    });
}

// Same tensors, same bytes.
void expect_identical(const fs::path& a_file, const fs::path& b_file) {
  const auto a = ck::SafetensorsFile::open(a_file);
  const auto b = ck::SafetensorsFile::open(b_file);
  BOOST_TEST_REQUIRE((a.names() == b.names()));
  for (const auto& name : a.names()) {
    const auto x = a.tensor(name), y = b.tensor(name);
    BOOST_TEST((x.bytes.size() == y.bytes.size() &&
                std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) == 0),
               name << " differs");
  }
}

struct Size {
  int64_t n, c, heads;
};

}  // namespace

BOOST_AUTO_TEST_CASE(phi_is_stored_as_megatrons_linear_weight) {
  TrainCorpus corpus;
  const auto out = corpus.dir.path() / "run";
  const auto run = run_process(corpus.train(out.string(), kMhc + " --set train.steps=2"));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const auto f = ck::SafetensorsFile::open(out / "checkpoints" / "step_00000002" / file);
    BOOST_TEST(f.metadata().at(ck::kLinearLayoutKey) == ck::kLinearLayoutOutIn);
    for (const std::string sub : {"self_attention", "mlp"}) {
      const std::string phi = "decoder.layers.1." + sub + "_hyper_connection.mapping_proj.weight";
      const std::string name = std::string(file) == "model.safetensors" ? phi : phi + ".exp_avg_sq";
      const auto shape = f.tensor(name).shape;
      // n = 4, C = 32: [n*n + 2n, n*C], as nn.Linear(n*C, n*n + 2n) holds its weight
      BOOST_TEST((std::vector<int64_t>(shape.begin(), shape.end()) == std::vector<int64_t>{24, 128}), name);
    }
  }
}

BOOST_AUTO_TEST_CASE(earlier_layout_resumes_exactly_with_a_notice) {
  // C = 32: the two layouts have different shapes. C = n + 2 = 6: both are [24, 24].
  for (const Size size : {Size{4, 32, 4}, Size{4, 6, 3}}) {
    BOOST_TEST_CONTEXT("n = " << size.n << ", C = " << size.c) {
      TrainCorpus corpus;
      const std::string model = kMhc + " --set mhc.num_residual_streams=" + std::to_string(size.n) +
                                " --set model.hidden_size=" + std::to_string(size.c) +
                                " --set model.num_attention_heads=" + std::to_string(size.heads) +
                                " --set train.steps=8";  // split 4 + 4
      const auto straight = corpus.dir.path() / "straight";
      const auto split = corpus.dir.path() / "split";
      const auto earlier = corpus.dir.path() / "earlier";
      BOOST_TEST_REQUIRE(run_process(corpus.train(straight.string(), model)).status == 0);
      const std::vector<double> expected = step_losses(straight / "metrics.jsonl");
      BOOST_TEST_REQUIRE(expected.size() == 8u);
      BOOST_TEST_REQUIRE(
          run_process(corpus.train(split.string(), model + " --set checkpoint.interval=4")).status == 0);
      std::vector<double> first = step_losses(split / "metrics.jsonl");
      first.resize(4);
      fs::remove(split / "metrics.jsonl");
      fs::remove_all(split / "checkpoints" / "step_00000008");
      fs::copy(split, earlier, fs::copy_options::recursive);
      to_earlier_layout(earlier / "checkpoints" / "step_00000004");

      // The current layout: the key says phi is stored transposed, even when it is square.
      const auto current = run_process(corpus.train(
          split.string(), model + " --resume " + quote((split / "checkpoints" / "step_00000004").string())));
      BOOST_TEST_REQUIRE(current.status == 0, current.output);
      BOOST_TEST(count_lines_with(current.output, kNotice) == 0u, current.output);
      std::vector<double> losses = first;
      for (double l : step_losses(split / "metrics.jsonl")) losses.push_back(l);
      BOOST_TEST(losses == expected, boost::test_tools::per_element());

      // The earlier layout: read as it is, with one line naming the checkpoint and phi.
      const auto old_dir = earlier / "checkpoints" / "step_00000004";
      const auto resumed =
          run_process(corpus.train(earlier.string(), model + " --resume " + quote(old_dir.string())));
      BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
      BOOST_TEST(count_lines_with(resumed.output, kNotice) == 1u, resumed.output);
      const auto notice_at = resumed.output.find(kNotice);
      const auto line_start = resumed.output.rfind('\n', notice_at) + 1;
      const std::string line =
          resumed.output.substr(line_start, resumed.output.find('\n', notice_at) - line_start);
      BOOST_TEST((line.find(old_dir.string()) != std::string::npos && line.find(kPhi0) != std::string::npos &&
                  line.find("and 3 more") != std::string::npos),
                 line);
      losses = first;
      for (double l : step_losses(earlier / "metrics.jsonl")) losses.push_back(l);
      BOOST_TEST(losses == expected, boost::test_tools::per_element());
      // It goes on in Megatron's layout: the next checkpoint is the straight run's.
      for (const char* file : {"model.safetensors", "optimizer.safetensors"})
        expect_identical(straight / "checkpoints" / "step_00000008" / file,
                         earlier / "checkpoints" / "step_00000008" / file);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_layout_is_refused_naming_the_key) {
  TrainCorpus corpus;
  const auto out = corpus.dir.path() / "run";
  BOOST_TEST_REQUIRE(run_process(corpus.train(out.string(), kMhc + " --set train.steps=2")).status == 0);
  const auto ckpt = out / "checkpoints" / "step_00000002";
  plexus::test::rewrite_checkpoint_file(ckpt, "model.safetensors", [](plexus::test::EditableFile& f) {
    f.metadata[ck::kLinearLayoutKey] = "[in, out]";
  });
  const auto resumed =
      run_process(corpus.train(out.string(), kMhc + " --set train.steps=4 --resume " + quote(ckpt.string())));
  BOOST_TEST(resumed.status == 1, resumed.output);
  BOOST_TEST((resumed.output.find(ck::kLinearLayoutKey) != std::string::npos &&
              resumed.output.find("[in, out]") != std::string::npos &&
              resumed.output.find("model.safetensors") != std::string::npos),
             resumed.output);
  BOOST_TEST(!fs::exists(out / "checkpoints" / "step_00000004"));
}

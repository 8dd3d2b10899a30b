// plexus-train on a GPU (run.device = "cuda"): the same tiny GPT, seed and tokens as on the CPU
// give the same losses within float32 tolerance, with and without mHC, and so does the Mamba-2 /
// attention hybrid of configs/hybrid.json; bf16 activations (run.precision = "bf16") track the
// float32 losses within bf16 tolerance; and a resumed GPU run continues bit for bit in both
// precisions and for the hybrid (every GPU kernel of the engine and the layers is deterministic).
#define BOOST_TEST_MODULE train_cuda
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "plexus/core/device.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "train_corpus.hpp"

using plexus::test::quote;
using plexus::test::run_process;
using plexus::test::step_losses;
using plexus::test::TrainCorpus;

PLEXUS_SKIP_MODULE_UNLESS(plexus::device::cuda_device_count() > 0,
                          "no CUDA GPU here (or a build without CUDA): GPU training needs one")

namespace {

const std::string kCuda = " --set run.device=\\\"cuda\\\"";
const std::string kBf16 = " --set run.precision=\\\"bf16\\\"";
const std::string kMhc =
    R"( --set mhc.enabled=true --set 'plugins.load=["sequential_scheduler","transformer","mhc_native"]')";
// configs/hybrid.json (pattern M*M-M*M-, its plugins and Mamba options) at the corpus's size
// (hidden 32: d_inner 64 in two heads of 32, one group), with chunks of 12 so that the 32-token
// sequences have two whole chunks and a ragged one. mamba.mixer runs float32 only on a GPU.
const std::string kHybrid = " --config " + quote(std::string(PLEXUS_SOURCE_DIR) + "/configs/hybrid.json") +
                            " --set model.num_layers=8 --set 'model.mamba.options={\"mamba_state_dim\": 32,"
                            " \"mamba_head_dim\": 32, \"mamba_num_groups\": 1, \"chunk_size\": 12}'";
// mhc_native runs float32 only; the fused backend also takes bfloat16 streams.
const std::string kFusedMhc = R"( --set mhc.enabled=true --set mhc.backend=\"mhc_fused\")"
                              R"( --set 'plugins.load=["sequential_scheduler","transformer","mhc_fused"]')";

// cuBLAS and OpenBLAS sum in different orders (~1e-6 relative per product); ten AdamW steps
// compound that. 1e-4 relative per step loss is the bar of the CPU parity test against PyTorch.
// The hybrid's Mamba layers add the same kind of difference (tests/gpu/test_mamba_cuda.cpp
// compares the layer itself) and are held to the same bar.
void expect_close(const std::vector<double>& gpu, const std::vector<double>& cpu) {
  BOOST_TEST_REQUIRE(gpu.size() == cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i)
    BOOST_TEST(std::abs(gpu[i] - cpu[i]) / std::abs(cpu[i]) < 1e-4,
               "step " << i + 1 << ": gpu " << gpu[i] << ", cpu " << cpu[i]);
}

}  // namespace

BOOST_AUTO_TEST_CASE(gpu_losses_match_the_cpu) {
  TrainCorpus corpus;
  for (const std::string& extra : {std::string(), kMhc, kHybrid}) {
    const auto cpu = corpus.dir.path() / ("cpu" + std::to_string(extra.size()));
    const auto gpu = corpus.dir.path() / ("gpu" + std::to_string(extra.size()));
    const auto a = run_process(corpus.train(cpu.string(), "--set train.steps=10" + extra));
    BOOST_TEST_REQUIRE(a.status == 0, a.output);
    const auto b = run_process(corpus.train(gpu.string(), "--set train.steps=10" + extra + kCuda));
    BOOST_TEST_REQUIRE(b.status == 0, b.output);
    expect_close(step_losses(gpu / "metrics.jsonl"), step_losses(cpu / "metrics.jsonl"));
  }
}

// bf16 against float32 on the same GPU, 20 AdamW steps. Every activation is rounded to an 8-bit
// significand (relative 2^-9 = 0.2% per stored value) and the products see bf16 weights, but the
// loss is a mean over 256 tokens in float32, whose error is far below a single value's; what
// grows is the drift of the two trajectories through AdamW, which normalizes each update. 2% per
// step bounds that drift on this model (a broken bf16 path, e.g. a wrong gradient, departs by
// far more within a few steps); the bf16 run must also learn at least half as much as float32.
BOOST_AUTO_TEST_CASE(bf16_losses_track_float32) {
  TrainCorpus corpus;
  for (const std::string& extra : {std::string(), kFusedMhc}) {
    const auto f32 = corpus.dir.path() / ("f32" + std::to_string(extra.size()));
    const auto bf16 = corpus.dir.path() / ("bf16" + std::to_string(extra.size()));
    const auto a = run_process(corpus.train(f32.string(), extra + kCuda));
    BOOST_TEST_REQUIRE(a.status == 0, a.output);
    const auto b = run_process(corpus.train(bf16.string(), extra + kCuda + kBf16));
    BOOST_TEST_REQUIRE(b.status == 0, b.output);
    const std::vector<double> reference = step_losses(f32 / "metrics.jsonl");
    const std::vector<double> losses = step_losses(bf16 / "metrics.jsonl");
    BOOST_TEST_REQUIRE(losses.size() == reference.size());
    for (std::size_t i = 0; i < losses.size(); ++i)
      BOOST_TEST(std::abs(losses[i] - reference[i]) / reference[i] < 2e-2,
                 "step " << i + 1 << ": bf16 " << losses[i] << ", float32 " << reference[i]);
    const double learned = reference.front() - reference.back();  // about 0.34 nats on the CPU
    BOOST_TEST(losses.front() - losses.back() > 0.5 * learned);
    const auto start = plexus::test::records(bf16 / "metrics.jsonl", "start");
    BOOST_TEST_REQUIRE(start.size() == 1u);
    BOOST_TEST(start[0].at("precision").as_string() == "bf16");
  }
}

BOOST_AUTO_TEST_CASE(gpu_resume_is_bit_identical) {
  for (const std::string& extra : {std::string(), kBf16, kHybrid}) {
    TrainCorpus corpus;
    const auto straight = corpus.dir.path() / "straight";
    const auto split = corpus.dir.path() / "split";
    BOOST_TEST_REQUIRE(run_process(corpus.train(straight.string(), kCuda + extra)).status == 0);
    BOOST_TEST_REQUIRE(
        run_process(corpus.train(split.string(), kCuda + extra + " --set checkpoint.interval=10")).status ==
        0);
    std::vector<double> losses = step_losses(split / "metrics.jsonl");
    losses.resize(10);
    std::filesystem::remove(split / "metrics.jsonl");
    std::filesystem::remove_all(split / "checkpoints" / "step_00000020");
    const auto resumed = run_process(corpus.train(
        split.string(),
        kCuda + extra + " --resume " + quote((split / "checkpoints" / "step_00000010").string())));
    BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
    for (double l : step_losses(split / "metrics.jsonl")) losses.push_back(l);
    BOOST_TEST(losses == step_losses(straight / "metrics.jsonl"), boost::test_tools::per_element());
  }
}

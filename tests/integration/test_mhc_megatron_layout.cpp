// The mHC projection phi a checkpoint holds is Megatron-LM's mapping_proj weight: a trainer run in
// this process writes its checkpoint, whose phi must be [n*n + 2n, n*C], the transpose of the
// phi the engine holds (bit for bit), and must load into PyTorch's nn.Linear(n*C, n*n + 2n) as
// Megatron builds it (tests/reference/megatron_mapping_proj.py) and compute there the projection
// x phi the engine computes. Reported skipped (exit 77) where /usr/bin/python3 cannot import torch.
#define BOOST_TEST_MODULE mhc_megatron_layout
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/safetensors.hpp"
#include "plexus/core/engine/trainer.hpp"
#include "plexus/core/run_config.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "train_corpus.hpp"

namespace ck = plexus::checkpoint;

namespace {

const std::string kPython = "/usr/bin/python3";

bool torch_available() {
  return plexus::test::run_process(kPython + " -c 'import torch'").status == 0;
}

float element(std::span<const std::byte> bytes, std::size_t i) {
  float v = 0;
  std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof(float));
  return v;
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(torch_available(), "/usr/bin/python3 cannot import torch (Debian: python3-torch)")

BOOST_AUTO_TEST_CASE(phi_in_a_checkpoint_is_megatrons_mapping_proj_weight) {
  plexus::test::TrainCorpus corpus;
  const int64_t n = 4, c = 32, width = n * n + 2 * n;
  boost::json::value run_config = plexus::load_run_config(
      std::nullopt, {"data.path=" + corpus.prefix, "run.output_dir=" + (corpus.dir.path() / "run").string(),
                     "model.num_layers=2", "model.hidden_size=" + std::to_string(c), "model.seq_length=32",
                     "train.micro_batch_size=4", "train.steps=3", "train.eval_interval=0", "sample.tokens=0",
                     "mhc.enabled=true", "mhc.num_residual_streams=" + std::to_string(n),
                     R"(plugins.load=["sequential_scheduler","transformer","mhc_native"])"});
  plexus::PluginHost host;
  plexus::load_configured_plugins(host, run_config,
                                  {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false});
  plexus::check_components(host, run_config);
  plexus::Trainer trainer(host, run_config, plexus::make_indexed_data_source(run_config));
  const plexus::TrainResult result = trainer.run();
  BOOST_TEST_REQUIRE(!result.last_checkpoint.empty());
  const auto model_file = result.last_checkpoint / "model.safetensors";
  const auto stored = ck::SafetensorsFile::open(model_file);

  const std::string name = "decoder.layers.1.mlp_hyper_connection.mapping_proj.weight";
  const plexus::Parameter* phi = trainer.model().parameters().find(name);
  BOOST_TEST_REQUIRE(phi != nullptr);
  BOOST_TEST_REQUIRE(
      (phi->value.shape() == std::vector<int64_t>{n * c, width}));  // as the "mhc" family takes it
  const auto weight = stored.tensor(name);
  BOOST_TEST_REQUIRE(
      (std::vector<int64_t>(weight.shape.begin(), weight.shape.end()) == std::vector<int64_t>{width, n * c}));
  const float* memory = phi->value.data<float>();
  std::size_t differing = 0;
  for (int64_t i = 0; i < n * c; ++i)
    for (int64_t j = 0; j < width; ++j)
      if (element(weight.bytes, static_cast<std::size_t>(j * n * c + i)) != memory[i * width + j])
        ++differing;
  BOOST_TEST(differing == 0u, differing << " elements of the stored weight are not phi transposed");

  // The engine's projection p = x phi, in float64, against Megatron's module holding the file's weight.
  const int64_t tokens = 5;
  std::mt19937 gen(3);
  std::normal_distribution<double> normal;
  std::vector<double> x(static_cast<std::size_t>(tokens * n * c)),
      expected(static_cast<std::size_t>(tokens * width));
  for (double& v : x) v = normal(gen);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < width; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < n * c; ++i)
        sum += x[t * n * c + i] * static_cast<double>(memory[i * width + j]);
      expected[t * width + j] = sum;
    }
  ck::SafetensorsWriter inputs;
  inputs.add("x", ck::DType::f64, {tokens, n * c}, std::as_bytes(std::span<const double>(x)));
  inputs.write(corpus.dir.path() / "x.safetensors");
  const auto torch = plexus::test::run_process(
      kPython + " " + std::string(PLEXUS_SOURCE_DIR) +
      "/tests/reference/megatron_mapping_proj.py --checkpoint " + plexus::test::quote(model_file.string()) +
      " --name " + name + " --streams " + std::to_string(n) + " --hidden " + std::to_string(c) +
      " --inputs " + plexus::test::quote((corpus.dir.path() / "x.safetensors").string()) + " --out " +
      plexus::test::quote((corpus.dir.path() / "proj.safetensors").string()));
  BOOST_TEST_REQUIRE(torch.status == 0, torch.output);
  const auto torch_file = ck::SafetensorsFile::open(corpus.dir.path() / "proj.safetensors");
  const auto proj = torch_file.tensor("proj");
  BOOST_TEST_REQUIRE(proj.bytes.size() == expected.size() * sizeof(double));
  // Both sides sum the same float64 products of float32 values in different orders: rounding
  // differences of about n*C * 1e-16 of the largest term; 1e-12 of the largest value leaves a
  // wide margin and still fails for any misplaced element.
  double worst = 0, largest = 0;
  for (std::size_t k = 0; k < expected.size(); ++k) {
    double v = 0;
    std::memcpy(&v, proj.bytes.data() + k * sizeof(double), sizeof(double));
    worst = std::max(worst, std::abs(v - expected[k]));
    largest = std::max(largest, std::abs(expected[k]));
  }
  BOOST_TEST(worst <= 1e-12 * largest, "largest difference " << worst << " of values up to " << largest);
}

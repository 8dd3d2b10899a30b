// Whole-model parity of a MIMO model with a PyTorch reference (tests/reference/mimo_reference.py,
// run with the system python and Debian's python3-torch): configs/mimo_digits.json's vision
// encoder and language model trained one step by plexus-train on every training sample of the
// digits in one microbatch; the reference reads the checkpoint's weights, the dataset's images and
// tokens, and computes the loss and every gradient in float64 with autograd.
//
// The step's gradients come out of plexus-train's checkpoint: with a learning rate of 1e-30 the
// weights do not move in float32, and AdamW's first moment after one step is (1 - beta1) times
// the gradient (clipping off). One microbatch holding every training sample makes the order in
// which the run reads them irrelevant: the mean loss and its gradients do not depend on it.
//
// What this covers beyond the layer parities: the splice (the encoder's rows in row-major order at
// the <image> tokens), the ignored targets before the image's tokens, the patch order, the tied
// output layer, the projection between the modules, and that every parameter gets its gradient
// under its Megatron name.
#define BOOST_TEST_MODULE mimo_parity
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "digits_data.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "temp_dir.hpp"
#include "train_corpus.hpp"

namespace fs = std::filesystem;
using namespace plexus::test;

namespace {

const std::string kPython = "/usr/bin/python3";

bool reference_available() {
  return run_process(kPython + " -c 'import torch, numpy'").status == 0;
}

// A stored tensor's values as doubles (float32 or float64, whatever its alignment).
std::vector<double> values(const plexus::checkpoint::SafetensorsFile& file, const std::string& name) {
  const auto view = file.tensor(name);
  std::vector<double> out;
  if (view.dtype == plexus::checkpoint::DType::f64) {
    out.resize(view.bytes.size() / sizeof(double));
    std::memcpy(out.data(), view.bytes.data(), view.bytes.size());
  } else {
    std::vector<float> f(view.bytes.size() / sizeof(float));
    std::memcpy(f.data(), view.bytes.data(), view.bytes.size());
    out.assign(f.begin(), f.end());
  }
  return out;
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(digits_csv().has_value() && reference_available(),
                          "needs scikit-learn's digits.csv.gz (scripts/fetch-digits.sh build/data) and "
                          "/usr/bin/python3 with torch and numpy (Debian: python3-torch, python3-numpy)")

BOOST_AUTO_TEST_CASE(loss_and_every_gradient_match_pytorch) {
  TempDir dir;
  const fs::path prefix = digits_dataset(dir.path());
  std::ifstream manifest_file(prefix.string() + ".mimo.json");
  const std::string manifest_text((std::istreambuf_iterator<char>(manifest_file)),
                                  std::istreambuf_iterator<char>());
  const int64_t train_samples = boost::json::parse(manifest_text).at("train_samples").to_number<int64_t>();

  const fs::path out = dir.path() / "run";
  const auto run =
      run_process("OMP_NUM_THREADS=2 " +
                  mimo_train_command(
                      prefix, out,
                      "--set train.steps=1 --set train.eval_interval=0 --set train.micro_batch_size=" +
                          std::to_string(train_samples) +
                          " --set optimizer.lr=1e-30 --set optimizer.min_lr=0 --set optimizer.clip_grad=0"));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  const fs::path checkpoint = out / "checkpoints" / "step_00000001";
  const fs::path result = dir.path() / "reference.safetensors";
  const auto reference = run_process(
      kPython + " " + quote(std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/mimo_reference.py") +
      " --data " + quote(prefix.string()) + " --checkpoint " + quote(checkpoint.string()) + " --samples 0 " +
      std::to_string(train_samples) + " --out " + quote(result.string()));
  BOOST_TEST_REQUIRE(reference.status == 0, reference.output);

  const auto ref = plexus::checkpoint::SafetensorsFile::open(result);
  const auto model = plexus::checkpoint::SafetensorsFile::open(checkpoint / "model.safetensors");
  const auto moments = plexus::checkpoint::SafetensorsFile::open(checkpoint / "optimizer.safetensors");

  // float32 against float64: measured 4e-8 relative; 1e-6 leaves a margin of 25.
  const double loss = records(out / "metrics.jsonl", "step").at(0).at("loss").to_number<double>();
  BOOST_TEST(loss == values(ref, "loss").at(0), boost::test_tools::tolerance(1e-6));

  // Each gradient, as the largest difference over the tensor's largest element: float32 sums over
  // the 1437 x 21 tokens against float64; measured at most 2.2e-6, and a gradient routed or
  // scaled wrongly is off by percents. beta1 = 0.9 (the config's default).
  const double beta1 = 0.9;
  std::size_t compared = 0;
  for (const std::string& name : model.names()) {
    const std::vector<double> theirs = values(ref, "grad/" + name);
    const std::vector<double> first_moment = values(moments, name + ".exp_avg");
    BOOST_TEST_REQUIRE(theirs.size() == first_moment.size(), name);
    double largest = 0, worst = 0;
    for (std::size_t i = 0; i < theirs.size(); ++i) {
      largest = std::max(largest, std::abs(theirs[i]));
      worst = std::max(worst, std::abs(first_moment[i] / (1 - beta1) - theirs[i]));
    }
    BOOST_TEST(largest > 0.0, name << " has no gradient in the reference");
    BOOST_TEST(worst <= 2e-5 * largest, name << ": largest difference " << worst << " of " << largest);
    ++compared;
  }
  // Every parameter of both modules: 24 of the encoder (its projection's 4 included), 14 of the
  // language model.
  BOOST_TEST(compared == 38u);
}

// How far apart two checkpoints' files are, for the tests that compare two runs of the same
// training (data parallelism, expert parallelism, the data-parallel strategies).
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"

namespace plexus::test {

// max |a - b| / max(max |a|, floor) over each float32 tensor of two safetensors files, which must
// hold the same names and shapes. The floor keeps a tensor that has barely left zero from being
// judged by its own rounding.
inline double worst_difference(const checkpoint::SafetensorsFile& a, const checkpoint::SafetensorsFile& b,
                               double floor = 0) {
  BOOST_TEST_REQUIRE(a.names() == b.names());
  double worst = 0;
  for (const std::string& name : a.names()) {
    const auto va = a.tensor(name);
    const auto vb = b.tensor(name);
    BOOST_TEST_REQUIRE(va.bytes.size() == vb.bytes.size(), name);
    const auto* fa = reinterpret_cast<const float*>(va.bytes.data());
    const auto* fb = reinterpret_cast<const float*>(vb.bytes.data());
    double scale = floor, diff = 0;
    for (std::size_t i = 0; i < va.bytes.size() / sizeof(float); ++i) {
      scale = std::max(scale, std::abs(static_cast<double>(fa[i])));
      diff = std::max(diff, std::abs(static_cast<double>(fa[i]) - fb[i]));
    }
    if (scale > 0) worst = std::max(worst, diff / scale);
  }
  return worst;
}

// Every tensor of two runs' checkpoints of one step (model and optimizer) byte for byte: the
// same names, and no tensor that differs (each one that does is named in the log).
inline void expect_identical_checkpoints(const std::filesystem::path& a, const std::filesystem::path& b,
                                         const std::string& step = "step_00000010") {
  const auto ca = checkpoint::load_checkpoint(a / "checkpoints" / step);
  const auto cb = checkpoint::load_checkpoint(b / "checkpoints" / step);
  BOOST_TEST_REQUIRE(ca.model.names() == cb.model.names());
  BOOST_TEST_REQUIRE(ca.optimizer.names() == cb.optimizer.names());
  std::size_t different = 0;
  const auto compare = [&](const checkpoint::SafetensorsFile& fa, const checkpoint::SafetensorsFile& fb) {
    for (const std::string& name : fa.names())
      if (!std::ranges::equal(fa.tensor(name).bytes, fb.tensor(name).bytes)) {
        BOOST_TEST_MESSAGE("differs: " << name);
        ++different;
      }
  };
  compare(ca.model, cb.model);
  compare(ca.optimizer, cb.optimizer);
  BOOST_TEST(different == 0u, different << " tensors differ");
}

}  // namespace plexus::test

// How far apart two checkpoints' files are, for the tests that compare two runs of the same
// training (data parallelism, expert parallelism, the data-parallel strategies).
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <string>

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

}  // namespace plexus::test

// The engine's host arithmetic (framework/src/engine/vector_ops): the finiteness scan that names
// the first layer producing a NaN or infinity, at every position that its chunked, threaded
// scan treats differently.
#define BOOST_TEST_MODULE vector_ops
#include <boost/test/unit_test.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/vector_ops.hpp"

namespace vo = plexus::vector_ops;

namespace {

// Sizes below, at and above the scan's chunk (2^14) and its threading threshold (2^15).
const std::vector<int64_t> kSizes{1, 7, 16383, 16384, 16385, 32768, 100003, 1 << 20};

}  // namespace

BOOST_AUTO_TEST_CASE(finite_values_of_every_magnitude_pass) {
  for (const int64_t n : kSizes) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      // The extremes of the float range: FLT_MAX * 0 and a subnormal * 0 are still 0.
      const float pick[] = {0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN, std::numeric_limits<float>::denorm_min(),
                            1.5f};
      v[static_cast<std::size_t>(i)] = pick[i % 7];
    }
    BOOST_TEST(vo::first_non_finite(v.data(), n) == -1, "n = " << n);
  }
  BOOST_TEST(vo::first_non_finite(nullptr, 0) == -1);
}

BOOST_AUTO_TEST_CASE(the_first_non_finite_value_is_found_wherever_it_is) {
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  for (const int64_t n : kSizes) {
    const std::vector<int64_t> positions{0, n / 2, n - 1, std::min<int64_t>(n - 1, 16383),
                                         std::min<int64_t>(n - 1, 16384)};
    for (const float bad : bad_values)
      for (const int64_t at : positions) {
        std::vector<float> v(static_cast<std::size_t>(n), 1.0f);
        v[static_cast<std::size_t>(at)] = bad;
        BOOST_TEST(vo::first_non_finite(v.data(), n) == at, "n = " << n << ", value " << bad << " at " << at);
        // A second one later does not change the answer; one earlier does.
        if (at + 1 < n) {
          v[static_cast<std::size_t>(n - 1)] = bad;
          BOOST_TEST(vo::first_non_finite(v.data(), n) == at);
        }
        if (at > 0) {
          v[0] = -bad;
          BOOST_TEST(vo::first_non_finite(v.data(), n) == 0);
        }
      }
  }
}

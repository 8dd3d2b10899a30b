// Counter-based RNG: the Philox4x32-10 known-answer vectors of Random123 (Salmon et al.), and
// the properties initialization relies on.
#define BOOST_TEST_MODULE random
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "plexus/core/engine/random.hpp"

BOOST_AUTO_TEST_CASE(philox_known_answers) {
  const auto zero = plexus::philox4x32({0, 0, 0, 0}, {0, 0});
  BOOST_TEST(zero[0] == 0x6627e8d5u);
  BOOST_TEST(zero[1] == 0xe169c58du);
  BOOST_TEST(zero[2] == 0xbc57ac4cu);
  BOOST_TEST(zero[3] == 0x9b00dbd8u);
  const auto ones = plexus::philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  BOOST_TEST(ones[0] == 0x408f276du);
  BOOST_TEST(ones[1] == 0x41c83b0eu);
  BOOST_TEST(ones[2] == 0xa20bc7c6u);
  BOOST_TEST(ones[3] == 0x6d5451fdu);
}

BOOST_AUTO_TEST_CASE(streams_are_pure_functions_of_seed_stream_and_index) {
  const plexus::CounterRng a(42, plexus::stable_hash("w")), b(42, plexus::stable_hash("w"));
  const plexus::CounterRng other_seed(43, plexus::stable_hash("w")), other_name(42, plexus::stable_hash("v"));
  BOOST_TEST(a.normal(7) == b.normal(7));
  BOOST_TEST(a.normal(7) != other_seed.normal(7));
  BOOST_TEST(a.normal(7) != other_name.normal(7));
}

BOOST_AUTO_TEST_CASE(normal_and_uniform_moments) {
  // 200k draws: the standard error of the mean is 1/sqrt(2e5) ~ 0.0022, so 0.01 is ~4.5 sigma.
  const plexus::CounterRng rng(1234, 5);
  const int n = 200000;
  double sum = 0, sum_sq = 0, usum = 0, umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal(static_cast<uint64_t>(i));
    sum += x;
    sum_sq += x * x;
    const double u = rng.uniform(static_cast<uint64_t>(i));
    usum += u;
    umin = std::min(umin, u);
    umax = std::max(umax, u);
  }
  BOOST_TEST(std::abs(sum / n) < 0.01);
  BOOST_TEST(std::abs(sum_sq / n - 1.0) < 0.02);  // var of x^2 is 2: se ~0.0032
  BOOST_TEST(std::abs(usum / n - 0.5) < 0.005);   // se of uniform mean ~0.00065
  BOOST_TEST(umin >= 0.0);
  BOOST_TEST(umax < 1.0);
}

BOOST_AUTO_TEST_CASE(stable_hash_is_fnv1a) {
  BOOST_TEST(plexus::stable_hash("") == 0xcbf29ce484222325ull);
  BOOST_TEST(plexus::stable_hash("a") == 0xaf63dc4c8601ec8cull);
}

// The engine's host arithmetic (framework/src/engine/vector_ops): the finiteness scan that names
// the first layer producing a NaN or infinity, at every position that its chunked, threaded
// scan treats differently; and the dtype checks of its device dispatch (engine/device_ops).
#define BOOST_TEST_MODULE vector_ops
#include <boost/test/unit_test.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/device_ops.hpp"
#include "engine/vector_ops.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "plexus/tensor.h"

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

// The dispatch over them (engine/device_ops): on the CPU the engine computes in float32, so a
// tensor of another dtype there is a bug in the caller, refused naming the operation and the
// dtype rather than read as floats; tensors of two dtypes in one call likewise. The finiteness
// scan answers -1 for dtypes with nothing to find (integers) instead of refusing.
BOOST_AUTO_TEST_CASE(device_ops_refuse_what_the_cpu_does_not_compute) {
  using plexus::Tensor;
  namespace ops = plexus::device_ops;
  const auto message = [](const auto& call) {
    try {
      call();
    } catch (const std::logic_error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  Tensor a({2, 3}, plx_dtype_bf16()), b({2, 3}, plx_dtype_bf16()), f({2, 3}, plx_dtype_f32());
  std::string e = message([&] { ops::add_into(a, b); });
  BOOST_TEST((e.find("add_into") != std::string::npos && e.find("bfloat16") != std::string::npos), e);
  e = message([&] { ops::add_into(f, a); });
  BOOST_TEST((e.find("float32") != std::string::npos && e.find("bfloat16") != std::string::npos), e);
  Tensor streams({2, 2, 3}, plx_dtype_bf16());
  e = message([&] { ops::expand_streams(a, 2, 2, 3, streams); });
  BOOST_TEST(e.find("expand_streams") != std::string::npos, e);
  e = message([&] { ops::mean_streams(streams, 2, 2, 3, f); });
  BOOST_TEST(e.find("mean_streams") != std::string::npos, e);
  BOOST_TEST(ops::first_non_finite(Tensor({4}, plx_dtype_i32())) == -1);
  f.data<float>()[4] = std::numeric_limits<float>::infinity();
  BOOST_TEST(ops::first_non_finite(f) == 4);
}

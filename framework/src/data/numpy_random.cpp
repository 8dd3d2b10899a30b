#include "plexus/core/data/numpy_random.hpp"

namespace plexus::data {

uint64_t NumpyRandomState::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (unsigned shift = 1; shift < 64; shift *= 2) mask |= mask >> shift;
  if (max <= 0xffffffffULL) {
    for (;;) {
      const uint64_t value = static_cast<uint64_t>(engine_()) & mask;
      if (value <= max) return value;
    }
  }
  for (;;) {
    const uint64_t high = engine_();
    const uint64_t value = ((high << 32) | engine_()) & mask;
    if (value <= max) return value;
  }
}

namespace {

// NumPy's pairwise_sum (numpy/core/src/umath/loops_utils.h): plain below 8 values, eight
// running sums up to 128, halves (at a multiple of 8) above.
double pairwise_sum(const double* a, std::size_t n) {
  if (n < 8) {
    double sum = 0.;
    for (std::size_t i = 0; i < n; ++i) sum += a[i];
    return sum;
  }
  if (n <= 128) {
    double r[8];
    for (std::size_t j = 0; j < 8; ++j) r[j] = a[j];
    std::size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (std::size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += a[i];
    return sum;
  }
  std::size_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

}  // namespace

double numpy_sum(std::span<const double> values) {
  return pairwise_sum(values.data(), values.size());
}

std::vector<double> normalize_weights(std::span<const double> weights) {
  const double sum = numpy_sum(weights);
  std::vector<double> out(weights.begin(), weights.end());
  for (double& w : out) w /= sum;
  return out;
}

}  // namespace plexus::data

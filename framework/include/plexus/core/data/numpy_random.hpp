// NumPy's legacy random state and float64 sum, bit for bit, so that the dataset indices Plexus
// builds are the ones Megatron-LM builds with numpy.random.RandomState(seed) (gpt_dataset.hpp).
//
// RandomState(seed) for an integer seed is MT19937 seeded by init_genrand(seed), which is what
// std::mt19937(seed) does; its shuffle walks i = n-1 .. 1 and swaps x[i] with x[j], j drawn
// uniformly from [0, i] by masking raw 32-bit draws to the smallest covering power of two and
// rejecting those above i (random_interval; above 2^32 - 1, 64-bit draws of two words, the first
// the high one).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace plexus::data {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : engine_(seed) {}

  // A uniform integer in [0, max] (numpy's random_interval).
  uint64_t interval(uint64_t max);

  // numpy.random.RandomState.shuffle of a 1-D array.
  template <class T>
  void shuffle(std::span<T> values) {
    for (std::size_t i = values.size(); i-- > 1;)
      std::swap(values[i], values[static_cast<std::size_t>(interval(i))]);
  }

 private:
  std::mt19937 engine_;
};

// numpy.sum of a float64 array: pairwise summation in blocks of 8, the way NumPy adds, so that
// normalized weights round as Megatron's do.
double numpy_sum(std::span<const double> values);

// Megatron's normalize(): each weight divided by numpy.sum of all.
std::vector<double> normalize_weights(std::span<const double> weights);

}  // namespace plexus::data

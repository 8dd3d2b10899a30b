#include "engine/context_parallel.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace plexus {

void take_context_parallel_chunks(const Tensor& whole, Tensor& local, int64_t rank, int64_t size) {
  const int64_t rows = whole.shape()[0], seq = whole.shape()[1], chunk = seq / (2 * size);
  if (seq % (2 * size) != 0 || local.shape()[0] != rows || local.shape()[1] != 2 * chunk)
    throw std::invalid_argument("context parallelism: a [" + std::to_string(rows) + ", " +
                                std::to_string(seq) + "] batch cannot be cut into " +
                                std::to_string(2 * size) + " chunks of [" + std::to_string(local.shape()[0]) +
                                ", " + std::to_string(local.shape()[1]) + "]");
  const int32_t* from = whole.data<int32_t>();
  int32_t* to = local.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* row = from + r * seq;
    std::copy_n(row + rank * chunk, chunk, to + r * 2 * chunk);
    std::copy_n(row + (2 * size - 1 - rank) * chunk, chunk, to + r * 2 * chunk + chunk);
  }
}

}  // namespace plexus

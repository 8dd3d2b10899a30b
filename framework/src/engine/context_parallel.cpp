#include "engine/context_parallel.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "plexus/cpp/context_parallel.hpp"

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
  // Each of this rank's two chunks, from where the SDK's layout places its first token.
  const int64_t held = 2 * chunk;  // this rank's tokens of a sequence
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 2; ++c)
      std::copy_n(from + r * seq +
                      sdk::context_parallel_position(c * chunk, held, static_cast<int32_t>(rank),
                                                     static_cast<int32_t>(size)),
                  chunk, to + r * held + c * chunk);
}

}  // namespace plexus

#include "engine/mtp_inputs.hpp"

#include <stdexcept>
#include <string>

namespace plexus {

void roll_for_mtp_depth(const Tensor& tokens, const Tensor& targets, uint32_t depth, Tensor& rolled_tokens,
                        Tensor& rolled_targets) {
  const auto& shape = tokens.shape();
  if (shape.size() != 2 || targets.shape() != shape || rolled_tokens.shape() != shape ||
      rolled_targets.shape() != shape)
    throw std::invalid_argument(
        "multi-token prediction depth " + std::to_string(depth) +
        ": the tokens, targets and their rolled copies must share one [rows, seq] shape");
  const int64_t rows = shape[0], seq = shape[1];
  const int32_t* from_tokens = tokens.data<int32_t>();
  const int32_t* from_targets = targets.data<int32_t>();
  int32_t* to_tokens = rolled_tokens.data<int32_t>();
  int32_t* to_targets = rolled_targets.data<int32_t>();
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t i = 0; i < seq; ++i) {
      const int64_t from = i + static_cast<int64_t>(depth);
      to_tokens[b * seq + i] = from < seq ? from_tokens[b * seq + from] : 0;
      to_targets[b * seq + i] = from < seq ? from_targets[b * seq + from] : -1;
    }
}

}  // namespace plexus

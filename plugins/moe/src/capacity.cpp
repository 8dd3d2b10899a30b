#include "capacity.hpp"

#include <algorithm>

namespace plexus::moe {

template <class T>
int64_t apply_capacity(const MoeConfig& c, int64_t tokens, const int32_t* chosen, const T* probs,
                       std::vector<uint8_t>& kept) {
  const int64_t pairs = tokens * c.topk, capacity = c.capacity(tokens);
  kept.assign(static_cast<std::size_t>(pairs), 1);
  // Each expert's pairs, in token order.
  std::vector<std::vector<int64_t>> by_expert(static_cast<std::size_t>(c.experts));
  for (int64_t i = 0; i < pairs; ++i) by_expert[static_cast<std::size_t>(chosen[i])].push_back(i);
  int64_t dropped = 0;
  for (std::vector<int64_t>& list : by_expert) {
    if (static_cast<int64_t>(list.size()) <= capacity) continue;
    if (!c.drop_by_position)
      std::stable_sort(list.begin(), list.end(), [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
    for (std::size_t i = static_cast<std::size_t>(capacity); i < list.size(); ++i) {
      kept[static_cast<std::size_t>(list[i])] = 0;
      ++dropped;
    }
  }
  return dropped;
}

template int64_t apply_capacity<float>(const MoeConfig&, int64_t, const int32_t*, const float*, std::vector<uint8_t>&);
template int64_t apply_capacity<double>(const MoeConfig&, int64_t, const int32_t*, const double*,
                                        std::vector<uint8_t>&);

}  // namespace plexus::moe

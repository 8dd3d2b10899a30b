// A rank grid: the world as a mixed-radix number whose digits are parallelism coordinates, the
// first axis fastest-varying. With axes tp, cp, dp, pp of sizes T, C, D, P a world rank is
//   rank = tp + T * (cp + C * (dp + D * pp)).
// A group "spanned by" some axes is the set of ranks that differ only in those axes' coordinates;
// this is the masked orthogonal enumeration Megatron-LM's RankGenerator performs, and it fixes
// both the order of the groups and the order of the ranks inside each group.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::topology_default {

struct Axis {
  std::string name;  // "tp", "cp", "ep", "dp", "pp"
  int32_t size = 1;
};

class RankGrid {
 public:
  // Axes fastest-varying first; the product of their sizes is the number of ranks.
  explicit RankGrid(std::vector<Axis> axes);

  int32_t num_ranks() const noexcept { return num_ranks_; }
  const std::vector<Axis>& axes() const noexcept { return axes_; }

  // Every group spanned by the axes named in `spanned` (each must be an axis of the grid; the
  // order in which they are named does not matter). Inside a group the rank at position i has
  // spanned coordinates equal to the digits of i, taken in axis order (first axis fastest); the
  // groups are listed by the digits of the other axes the same way. Together the groups
  // partition the world.
  std::vector<std::vector<int32_t>> groups(const std::vector<std::string_view>& spanned) const;

 private:
  std::vector<Axis> axes_;
  std::vector<int32_t> strides_;  // strides_[i] = product of the sizes of the axes before i
  int32_t num_ranks_ = 1;
};

}  // namespace plexus::topology_default

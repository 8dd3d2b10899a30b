// A rank grid (the topology providers' shared enumeration, plugins/common/rank_grid): a block of
// consecutive world ranks as a mixed-radix number whose digits are parallelism coordinates, the
// first axis fastest-varying. With axes tp, cp, dp, pp of sizes T, C, D, P a world rank is
//   rank = offset + tp + T * (cp + C * (dp + D * pp)).
// A group "spanned by" some axes is the set of ranks that differ only in those axes' coordinates;
// this is the masked orthogonal enumeration Megatron-LM's RankGenerator performs, and it fixes
// both the order of the groups and the order of the ranks inside each group.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::rank_grid {

struct Axis {
  std::string name;  // "tp", "cp", "ep", "dp", "pp"
  int32_t size = 1;
};

class RankGrid {
 public:
  // Axes fastest-varying first; the product of their sizes is the number of ranks, which are the
  // world ranks [offset, offset + num_ranks) (a module's grid of a heterogeneous model starts at
  // its rank offset; a whole-world grid at 0).
  explicit RankGrid(std::vector<Axis> axes, int32_t offset = 0);

  int32_t num_ranks() const noexcept { return num_ranks_; }
  int32_t offset() const noexcept { return offset_; }
  const std::vector<Axis>& axes() const noexcept { return axes_; }

  // Every group spanned by the axes named in `spanned` (each must be an axis of the grid; the
  // order in which they are named does not matter). Inside a group the rank at position i has
  // spanned coordinates equal to the digits of i, taken in axis order (first axis fastest); the
  // groups are listed by the digits of the other axes the same way. Together the groups
  // partition the grid's ranks.
  std::vector<std::vector<int32_t>> groups(const std::vector<std::string_view>& spanned) const;

 private:
  std::vector<Axis> axes_;
  std::vector<int32_t> strides_;  // strides_[i] = product of the sizes of the axes before i
  int32_t num_ranks_ = 1;
  int32_t offset_ = 0;
};

}  // namespace plexus::rank_grid

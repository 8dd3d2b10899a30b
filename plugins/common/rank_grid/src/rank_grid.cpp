// The masked orthogonal enumeration of rank_grid.hpp.
#include "plexus_rank_grid/rank_grid.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace plexus::rank_grid {

namespace {

// The axes a group spans (or the ones it does not), in grid order: their sizes and strides.
struct Digits {
  std::vector<int32_t> sizes;
  std::vector<int32_t> strides;
  int32_t count = 1;  // how many numbers these digits write: the product of the sizes

  // The world-rank offset of the number `value` written in these digits (first digit fastest).
  int32_t offset(int32_t value) const {
    int32_t out = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      out += (value % sizes[i]) * strides[i];
      value /= sizes[i];
    }
    return out;
  }
};

}  // namespace

RankGrid::RankGrid(std::vector<Axis> axes, int32_t offset) : axes_(std::move(axes)), offset_(offset) {
  if (offset < 0) throw std::logic_error("rank grid: offset " + std::to_string(offset) + " is negative");
  for (const Axis& a : axes_) {
    if (a.size < 1)
      throw std::logic_error("rank grid: axis " + a.name + " has size " + std::to_string(a.size));
    strides_.push_back(num_ranks_);
    num_ranks_ *= a.size;
  }
}

std::vector<std::vector<int32_t>> RankGrid::groups(const std::vector<std::string_view>& spanned) const {
  for (std::string_view name : spanned) {
    const bool known = std::any_of(axes_.begin(), axes_.end(), [&](const Axis& a) { return a.name == name; });
    if (!known) throw std::logic_error("rank grid: no axis named " + std::string(name));
  }
  Digits inside, across;  // inside a group: the spanned axes; across groups: the others
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    const bool in = std::find(spanned.begin(), spanned.end(), axes_[i].name) != spanned.end();
    Digits& d = in ? inside : across;
    d.sizes.push_back(axes_[i].size);
    d.strides.push_back(strides_[i]);
    d.count *= axes_[i].size;
  }
  std::vector<std::vector<int32_t>> out(static_cast<std::size_t>(across.count));
  for (int32_t g = 0; g < across.count; ++g) {
    const int32_t base = offset_ + across.offset(g);
    std::vector<int32_t>& group = out[static_cast<std::size_t>(g)];
    group.reserve(static_cast<std::size_t>(inside.count));
    for (int32_t i = 0; i < inside.count; ++i) group.push_back(base + inside.offset(i));
  }
  return out;
}

}  // namespace plexus::rank_grid

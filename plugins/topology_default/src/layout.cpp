// Reading the grid options and checking them against the world size. The checks are the ones
// Megatron-LM's initialize_model_parallel makes (the world must factor into both grids; with pp
// not last in the order the two grids must agree on dp; both grids must give the same pipeline
// groups), plus what its order string leaves unchecked (unknown or repeated names).
#include "layout.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plexus/cpp/error.hpp"
#include "plexus/cpp/host.hpp"

namespace plexus::topology_default {
namespace {

using plexus::sdk::Error;

// The parallelisms an order may name, in the default order (fastest-varying first).
constexpr std::array<std::string_view, 5> kNames{"tp", "cp", "ep", "dp", "pp"};
constexpr std::size_t kTp = 0, kCp = 1, kEp = 2, kDp = 3, kPp = 4;

// One size per name of kNames, for one grid, with the option each size comes from.
struct GridSizes {
  std::array<int64_t, kNames.size()> size{};
  std::array<std::string_view, kNames.size()> option{};
};

std::string key_path(const std::string& where, std::string_view key) {
  return where.empty() ? std::string(key) : where + "." + std::string(key);
}

[[noreturn]] void refuse(const std::string& path, const std::string& message) {
  throw Error(PLX_ERR_INVALID_ARGUMENT, path + ": " + message);
}

std::size_t index_of(std::string_view name) {
  return static_cast<std::size_t>(std::find(kNames.begin(), kNames.end(), name) - kNames.begin());
}

// "tp (4) x cp (1) x pp (1) = 4". Options are not bounded above by the schema, so the product
// may pass int64: it is then only said to be too large (it cannot divide an int32 world size).
struct Product {
  std::string text;
  std::optional<int64_t> value;
};
Product product(const GridSizes& grid, std::initializer_list<std::size_t> axes) {
  Product p{std::string(), int64_t{1}};
  for (std::size_t a : axes) {
    p.text += (p.text.empty() ? "" : " x ") + std::string(grid.option[a]) + " (" +
              std::to_string(grid.size[a]) + ")";
    int64_t next = 0;
    if (p.value && !__builtin_mul_overflow(*p.value, grid.size[a], &next))
      p.value = next;
    else
      p.value.reset();
  }
  p.text += p.value ? " = " + std::to_string(*p.value)
                    : " > " + std::to_string(std::numeric_limits<int64_t>::max());
  return p;
}

// The world size divided by the product of `axes`, or a refusal naming them.
int64_t quotient(int32_t world_size, const GridSizes& grid, std::initializer_list<std::size_t> axes,
                 const std::string& where) {
  const Product p = product(grid, axes);
  if (!p.value || world_size % *p.value != 0)
    refuse(where, "world size " + std::to_string(world_size) + " is not divisible by " + p.text);
  return world_size / *p.value;
}

// The names of `order` ("tp-cp-ep-dp-pp"), each a known parallelism, none twice.
std::vector<std::string_view> parse_order(std::string_view order, const std::string& path) {
  std::vector<std::string_view> names;
  for (std::size_t start = 0;;) {
    const std::size_t dash = order.find('-', start);
    const std::string_view name = order.substr(start, dash == std::string_view::npos ? dash : dash - start);
    if (index_of(name) == kNames.size())
      refuse(path, '\'' + std::string(order) + "' names '" + std::string(name) +
                       "', which is not a parallelism (expected tp, cp, ep, dp and pp joined by '-')");
    if (std::find(names.begin(), names.end(), name) != names.end())
      refuse(path, '\'' + std::string(order) + "' names " + std::string(name) + " twice");
    names.push_back(name);
    if (dash == std::string_view::npos) return names;
    start = dash + 1;
  }
}

// The product of the sizes of the axes before pp: the distance between neighbours in a pipeline
// group, which fixes the pipeline groups of a grid of a given world size and pp.
int64_t pp_stride(const GridSizes& grid, const std::vector<std::string_view>& order) {
  int64_t stride = 1;
  for (std::string_view name : order) {
    if (name == "pp") break;
    stride *= grid.size[index_of(name)];
  }
  return stride;
}

RankGrid make_grid(const GridSizes& grid, const std::vector<std::string_view>& order) {
  std::vector<Axis> axes;
  for (std::string_view name : order)
    axes.push_back({std::string(name), static_cast<int32_t>(grid.size[index_of(name)])});
  return RankGrid(std::move(axes));
}

}  // namespace

GridOptions read_options(plx_config config) {
  const plexus::sdk::Host host = plexus::sdk::Host::current();
  GridOptions o;
  o.tp = host.config_int(config, "tp");
  o.cp = host.config_int(config, "cp");
  o.ep = host.config_int(config, "ep");
  o.pp = host.config_int(config, "pp");
  o.expert_tp = host.config_int_if(config, "expert_tp").value_or(o.tp);
  o.order = host.config_string(config, "order");
  return o;
}

Layout plan_layout(const GridOptions& o, int32_t world_size, const std::string& where) {
  if (world_size < 1)
    throw Error(PLX_ERR_INVALID_ARGUMENT, "world size must be at least 1, got " + std::to_string(world_size));
  for (const auto& [key, value] : {std::pair<std::string_view, int64_t>{"tp", o.tp},
                                   {"cp", o.cp},
                                   {"ep", o.ep},
                                   {"pp", o.pp},
                                   {"expert_tp", o.expert_tp}})
    if (value < 1) refuse(key_path(where, key), "must be at least 1, got " + std::to_string(value));
  const std::string order_path = key_path(where, "order");
  std::vector<std::string_view> order = parse_order(o.order, order_path);
  const bool pp_last = order.back() == "pp";

  GridSizes dense{{o.tp, o.cp, 1, 0, o.pp}, {"tp", "cp", "ep", "dp", "pp"}};
  dense.size[kDp] = quotient(world_size, dense, {kTp, kCp, kPp}, where);
  GridSizes expert{{o.expert_tp, 1, o.ep, 0, o.pp}, {"expert_tp", "cp", "ep", "expert_dp", "pp"}};
  expert.size[kDp] = quotient(world_size, expert, {kTp, kEp, kPp}, where);

  // A name may be left out of the order when it is 1 in both grids; it then goes last, where a
  // size-1 axis changes nothing.
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (std::find(order.begin(), order.end(), kNames[i]) != order.end()) continue;
    for (const GridSizes* grid : {&dense, &expert})
      if (grid->size[i] > 1)
        refuse(order_path, "'" + o.order + "' leaves out " + std::string(kNames[i]) + ", but " +
                               std::string(grid->option[i]) + " is " + std::to_string(grid->size[i]) +
                               ": only a parallelism of size 1 may be left out");
    order.push_back(kNames[i]);
  }

  if (!pp_last && o.pp > 1 && expert.size[kDp] != dense.size[kDp])
    refuse(order_path, "'" + o.order + "' does not put pp last, so with pp (" + std::to_string(o.pp) +
                           ") > 1 the expert grid's expert_dp (" + std::to_string(expert.size[kDp]) +
                           ") must equal the dense grid's dp (" + std::to_string(dense.size[kDp]) + ")");
  const int64_t dense_stride = pp_stride(dense, order), expert_stride = pp_stride(expert, order);
  if (o.pp > 1 && dense_stride != expert_stride)
    refuse(order_path, "'" + o.order +
                           "' gives the dense and the expert grid different pipeline groups: the sizes "
                           "before pp multiply to " +
                           std::to_string(dense_stride) + " in the dense grid and to " +
                           std::to_string(expert_stride) +
                           " in the expert grid (put pp last, or make them equal)");

  return Layout{make_grid(dense, order), make_grid(expert, order)};
}

}  // namespace plexus::topology_default

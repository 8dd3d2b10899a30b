#include "options.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "plexus/cpp/host.hpp"

namespace fsdp {

namespace {

using plexus::sdk::Error;
using plexus::sdk::Host;

constexpr std::array<Strategy, 4> kStrategies = {Strategy::no_shard, Strategy::optim, Strategy::optim_grads,
                                                 Strategy::optim_grads_params};

// Edits (insert, delete, substitute) turning a into b: the measure "did you mean" uses.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string nearest_strategy(const std::string& given) {
  std::string best;
  std::size_t best_distance = 0;
  for (Strategy s : kStrategies) {
    const std::string name = strategy_name(s);
    const std::size_t d = edit_distance(given, name);
    if (best.empty() || d < best_distance) {
      best = name;
      best_distance = d;
    }
  }
  return best;
}

std::string key_path(const Host& host, plx_config config, const char* key) {
  std::string path;
  try {
    path = host.config_path(config);
  } catch (const Error&) {
    path = "distributed.data_parallel.options";
  }
  return (path.empty() ? std::string() : path + ".") + key;
}

}  // namespace

const char* strategy_name(Strategy s) noexcept {
  switch (s) {
    case Strategy::no_shard: return "no_shard";
    case Strategy::optim: return "optim";
    case Strategy::optim_grads: return "optim_grads";
    case Strategy::optim_grads_params: return "optim_grads_params";
  }
  return "?";
}

Options read_options(plx_config config) {
  Options o;
  if (config == nullptr) return o;
  const Host host = Host::current();
  const char* text = nullptr;
  const plx_status s = host.api()->config_get_string(host.api()->ctx, config, "strategy", &text);
  if (s != PLX_ERR_NOT_FOUND) {
    plexus::sdk::check_host(s);
    const std::string given = text;
    const auto known = std::find_if(kStrategies.begin(), kStrategies.end(),
                                    [&](Strategy k) { return given == strategy_name(k); });
    if (known == kStrategies.end())
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  key_path(host, config, "strategy") + ": unknown strategy '" + given + "' (did you mean '" +
                      nearest_strategy(given) +
                      "'? expected one of no_shard, optim, optim_grads, optim_grads_params)");
    o.strategy = *known;
  }
  o.prefetch = host.config_bool_if(config, "prefetch").value_or(true);
  return o;
}

}  // namespace fsdp

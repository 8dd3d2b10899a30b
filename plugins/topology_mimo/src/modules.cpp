// Reading and checking the modules. The checks are Megatron-LM's (examples/mimo/training/
// topology.py and HyperCommGrid): one language module, sizes that divide, a grid inside the world,
// spans all equal or pairwise disjoint, spans that partition the world; plus what Python's dict
// keys gave Megatron for free (unique names) and what a group kind needs (no '/').
#include "modules.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "plexus/cpp/error.hpp"

namespace plexus::topology_mimo {
namespace {

using plexus::sdk::Error;

[[noreturn]] void refuse(const std::string& path, const std::string& message) {
  throw Error(PLX_ERR_INVALID_ARGUMENT, path + ": " + message);
}

int64_t size_of(const boost::json::object& entry, const char* key, int64_t fallback,
                const std::string& path) {
  const boost::json::value* v = entry.if_contains(key);
  if (v == nullptr) return fallback;
  if (!v->is_int64() && !v->is_uint64())
    refuse(path + "." + key, "must be an integer, got " + boost::json::serialize(*v));
  const int64_t value = v->is_int64() ? v->as_int64() : static_cast<int64_t>(v->as_uint64());
  const int64_t least = std::string(key) == "rank_offset" ? 0 : 1;
  if (value < least || value > std::numeric_limits<int32_t>::max())
    refuse(path + "." + key,
           "must be from " + std::to_string(least) + " to 2147483647, got " + std::to_string(value));
  return value;
}

ModuleSpec read_module(const boost::json::value& value, const std::string& path) {
  if (!value.is_object())
    refuse(path, "must be an object {name, num_ranks, tp, cp, pp, ep, expt_tp, rank_offset}");
  const boost::json::object& entry = value.as_object();
  ModuleSpec m;
  const boost::json::value* name = entry.if_contains("name");
  if (name == nullptr || !name->is_string()) refuse(path + ".name", "every module needs a name (a string)");
  m.name = std::string(name->as_string());
  if (m.name.empty() || m.name.find_first_of("/ \t\n") != std::string::npos)
    refuse(path + ".name",
           "'" + m.name +
               "' cannot name a module: a module's groups are called '<module>/<kind>', so its "
               "name must be non-empty without '/' or spaces");
  m.path = path + " (" + m.name + ")";
  if (entry.if_contains("num_ranks") == nullptr)
    refuse(m.path, "num_ranks is missing (how many ranks its grid spans)");
  m.num_ranks = size_of(entry, "num_ranks", 0, m.path);
  m.tp = size_of(entry, "tp", 1, m.path);
  m.cp = size_of(entry, "cp", 1, m.path);
  m.pp = size_of(entry, "pp", 1, m.path);
  m.ep = size_of(entry, "ep", 1, m.path);
  m.expt_tp = size_of(entry, "expt_tp", 1, m.path);
  m.rank_offset = size_of(entry, "rank_offset", 0, m.path);
  return m;
}

// num_ranks / (a x b x c), or a refusal naming the sizes, as Megatron's ModuleGridSpec words it.
int64_t derived(const ModuleSpec& m, const std::vector<std::pair<const char*, int64_t>>& factors) {
  int64_t product = 1;
  std::string text;
  for (const auto& [name, size] : factors) {
    text += (text.empty() ? "" : " x ") + std::string(name) + " (" + std::to_string(size) + ")";
    if (__builtin_mul_overflow(product, size, &product)) product = std::numeric_limits<int64_t>::max();
  }
  if (m.num_ranks % product != 0)
    refuse(m.path, "num_ranks (" + std::to_string(m.num_ranks) + ") must be divisible by " + text + " = " +
                       std::to_string(product));
  return m.num_ranks / product;
}

std::string names_text(const std::vector<ModuleSpec>& modules) {
  std::string text;
  for (const ModuleSpec& m : modules) text += (text.empty() ? "" : ", ") + m.name;
  return text;
}

// "2, 3, 6, 7" as "2-3, 6-7".
std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += std::to_string(ranks[i]);
    if (j > i) text.append(1, '-').append(std::to_string(ranks[j]));
    i = j + 1;
  }
  return text;
}

void check_spans(const std::vector<ModuleSpec>& modules, int32_t world_size, const std::string& where) {
  for (const ModuleSpec& m : modules)
    if (m.end() > world_size)
      refuse(m.path, "spans ranks [" + std::to_string(m.rank_offset) + ", " + std::to_string(m.end()) +
                         ") (rank_offset " + std::to_string(m.rank_offset) + " + num_ranks " +
                         std::to_string(m.num_ranks) + ") but the world has " + std::to_string(world_size) +
                         " ranks");
  const ModuleSpec& first = modules.front();
  const bool all_same = std::all_of(modules.begin(), modules.end(), [&](const ModuleSpec& m) {
    return m.rank_offset == first.rank_offset && m.num_ranks == first.num_ranks;
  });
  if (!all_same) {
    for (std::size_t a = 0; a < modules.size(); ++a)
      for (std::size_t b = a + 1; b < modules.size(); ++b) {
        const ModuleSpec& x = modules[a];
        const ModuleSpec& y = modules[b];
        if (x.end() <= y.rank_offset || y.end() <= x.rank_offset) continue;
        const int64_t lo = std::max(x.rank_offset, y.rank_offset), hi = std::min(x.end(), y.end()) - 1;
        refuse(where, "module grids must either fully share ranks (colocated) or be pairwise disjoint, got " +
                          spans_text(modules) + ": " + x.name + " and " + y.name + " share " +
                          (lo == hi ? "rank " + std::to_string(lo)
                                    : "ranks " + std::to_string(lo) + "-" + std::to_string(hi)) +
                          " (colocated modules need the same rank_offset and num_ranks)");
      }
  }
  std::vector<int64_t> uncovered;
  for (int64_t r = 0; r < world_size; ++r)
    if (std::none_of(modules.begin(), modules.end(),
                     [&](const ModuleSpec& m) { return m.rank_offset <= r && r < m.end(); }))
      uncovered.push_back(r);
  if (!uncovered.empty())
    refuse(where, "module grids must partition the world [0, " + std::to_string(world_size) +
                      ") with no gaps, got " + spans_text(modules) + ": rank" +
                      (uncovered.size() > 1 ? "s " : " ") + ranks_text(uncovered) +
                      (uncovered.size() > 1 ? " are" : " is") + " in no module");
}

}  // namespace

std::string spans_text(const std::vector<ModuleSpec>& modules) {
  std::string text;
  for (const ModuleSpec& m : modules)
    text += (text.empty() ? "" : ", ") + m.name + " [" + std::to_string(m.rank_offset) + ", " +
            std::to_string(m.end()) + ")";
  return text;
}

std::vector<ModuleGrids> plan_modules(const std::string& modules_json, int32_t world_size,
                                      const std::string& where) {
  boost::json::value parsed;
  try {
    parsed = boost::json::parse(modules_json);
  } catch (const std::exception& e) {
    refuse(where, std::string("is not JSON: ") + e.what());
  }
  if (!parsed.is_array() || parsed.as_array().empty())
    refuse(where,
           "must list the modules, at least one, exactly one of them named \"language\" (e.g. "
           "[{\"name\": \"images\", \"num_ranks\": 1}, {\"name\": \"language\", \"num_ranks\": 1, "
           "\"rank_offset\": 1}])");
  std::vector<ModuleSpec> modules;
  const boost::json::array& entries = parsed.as_array();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    ModuleSpec m = read_module(entries[i], where + "[" + std::to_string(i) + "]");
    for (const ModuleSpec& earlier : modules)
      if (earlier.name == m.name)
        refuse(m.path, "a second module named '" + m.name + "' (" + earlier.path + ")");
    modules.push_back(std::move(m));
  }
  const auto languages =
      std::count_if(modules.begin(), modules.end(), [](const ModuleSpec& m) { return m.name == kLanguage; });
  if (languages != 1)
    refuse(where, std::string("exactly one module must be named \"") + kLanguage +
                      "\" (the language model the others feed), got " +
                      (languages == 0 ? std::string("none") : std::to_string(languages)) +
                      " among: " + names_text(modules));
  for (ModuleSpec& m : modules) {
    m.dp = derived(m, {{"tp", m.tp}, {"cp", m.cp}, {"pp", m.pp}});
    m.expt_dp = derived(m, {{"expt_tp", m.expt_tp}, {"ep", m.ep}, {"pp", m.pp}});
  }
  check_spans(modules, world_size, where);

  std::vector<ModuleGrids> out;
  for (const ModuleSpec& m : modules) {
    const auto offset = static_cast<int32_t>(m.rank_offset);
    const auto axis = [](const char* name, int64_t size) {
      return rank_grid::Axis{name, static_cast<int32_t>(size)};
    };
    rank_grid::RankGrid dense({axis("tp", m.tp), axis("cp", m.cp), axis("dp", m.dp), axis("pp", m.pp)},
                              offset);
    rank_grid::RankGrid expert(
        {axis("tp", m.expt_tp), axis("ep", m.ep), axis("dp", m.expt_dp), axis("pp", m.pp)}, offset);
    out.push_back(ModuleGrids{m, std::move(dense), std::move(expert)});
  }
  return out;
}

}  // namespace plexus::topology_mimo

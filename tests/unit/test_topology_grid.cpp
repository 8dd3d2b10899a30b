// The "grid" topology provider (plugins/topology_default), loaded through the real plugin host
// and called as the host will call it. Its groups are checked against Megatron-LM's own
// documented examples (hard-coded here), against an independent Python enumeration of
// Megatron's grids (tests/reference/megatron_grid.py) over many sizes and orders, and against
// the promises of topology.h (every kind partitions the world, the same on every rank); every
// refusal is checked for its status and for a message naming the option and the numbers.
#define BOOST_TEST_MODULE topology_grid
#include <boost/test/unit_test.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "plexus/core/components.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/errors.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/topology.h"
#include "run_process.hpp"

namespace fs = std::filesystem;

namespace {

using Groups = std::vector<std::vector<int32_t>>;
using Enumeration = std::map<std::string, Groups>;  // kind -> groups, in the order they came

const std::string kPython = "/usr/bin/python3";
const std::string kReference = std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/megatron_grid.py";
const std::string kOptionsPath = "distributed.topology.options";

// The kinds the provider promises (plugins/topology_default/README.md).
const std::set<std::string> kKinds{"tp", "cp",       "dp", "pp",        "dp_cp",     "tp_cp",
                                   "mp", "tp_dp_cp", "ep", "expert_tp", "expert_dp", "tp_ep"};

plexus::PluginHost& host() {
  static plexus::PluginHost instance;
  static const bool loaded = [] {
    const fs::path file = std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins/libplexus_topology_default.so";
    if (!fs::exists(file))
      throw std::runtime_error("the topology_default plugin is not built: " + file.string() + " is missing");
    instance.load(file);
    return true;
  }();
  (void)loaded;
  return instance;
}

const plexus::Component& grid() {
  return host().get(PLX_KIND_TOPOLOGY, "grid");
}

// The options node: validated against the component's own schema with its defaults filled in,
// as the engine does before it calls a component, or (`validated` false) passed as written.
std::unique_ptr<plexus::ConfigHandle> options(const std::string& json, bool validated = true) {
  boost::json::value value = boost::json::parse(json);
  if (validated) {
    const auto schema = plexus::config::Schema::parse(grid().config_schema, grid().name);
    plexus::config::validate(value, schema, kOptionsPath);
  }
  return std::make_unique<plexus::ConfigHandle>(std::move(value), kOptionsPath);
}

plx_status collect(void* ctx, const char* kind, const int32_t* ranks, uint32_t count) {
  (*static_cast<Enumeration*>(ctx))[kind].emplace_back(ranks, ranks + count);
  return PLX_OK;
}

// Calls build; a refusal throws ComponentCallError carrying the plugin's message.
Enumeration enumerate(int32_t world, const std::string& json, int32_t rank = 0, bool validated = true) {
  const auto config = options(json, validated);
  plx_topology_args args{};
  args.struct_size = sizeof(args);
  args.world_size = world;
  args.rank = rank;
  args.config = config->get();
  Enumeration out;
  const plx_group_sink sink{sizeof(plx_group_sink), 0, &out, &collect};
  plexus::check_call(grid(), "build", grid().as<plx_topology_v1>().build(&args, &sink));
  return out;
}

// Expects build to refuse with PLX_ERR_INVALID_ARGUMENT and a message containing `text`.
void expect_refusal(int32_t world, const std::string& json, const std::string& text, bool validated = true,
                    int32_t rank = 0) {
  try {
    enumerate(world, json, rank, validated);
    BOOST_ERROR("world " << world << ", options " << json << ": expected a refusal containing: " << text);
  } catch (const plexus::ComponentCallError& e) {
    BOOST_TEST_MESSAGE("refused: " << e.what());
    BOOST_TEST(e.status() == PLX_ERR_INVALID_ARGUMENT, "status " << e.status() << ": " << e.what());
    BOOST_TEST(std::string(e.what()).find(text) != std::string::npos,
               "message '" << e.what() << "' should contain '" << text << "'");
  }
}

std::string text(const Groups& groups) {
  std::ostringstream s;
  for (const auto& g : groups) {
    s << "[";
    for (std::size_t i = 0; i < g.size(); ++i) s << (i ? "," : "") << g[i];
    s << "]";
  }
  return s.str();
}

// One configuration: the world size and the options as the user writes them.
struct Sizes {
  int32_t world;
  int32_t tp = 1, cp = 1, ep = 1, pp = 1;
  int32_t expert_tp = 0;  // 0: not given (then it is tp)
  std::string order;      // empty: not given

  int32_t etp() const { return expert_tp > 0 ? expert_tp : tp; }
  int32_t dp() const { return world / (tp * cp * pp); }
  int32_t edp() const { return world / (etp() * ep * pp); }
  std::string json() const {
    std::string j = "{\"tp\": " + std::to_string(tp) + ", \"cp\": " + std::to_string(cp) +
                    ", \"ep\": " + std::to_string(ep) + ", \"pp\": " + std::to_string(pp);
    if (expert_tp > 0) j += ", \"expert_tp\": " + std::to_string(expert_tp);
    if (!order.empty()) j += ", \"order\": \"" + order + "\"";
    return j + "}";
  }
  std::string arguments() const {
    std::string a = "--world " + std::to_string(world) + " --tp " + std::to_string(tp) + " --cp " +
                    std::to_string(cp) + " --ep " + std::to_string(ep) + " --pp " + std::to_string(pp);
    if (expert_tp > 0) a += " --expert-tp " + std::to_string(expert_tp);
    if (!order.empty()) a += " --order " + plexus::test::quote(order);
    return a;
  }
  std::string name() const { return "world " + std::to_string(world) + " " + json(); }
};

Sizes sizes(int32_t world, int32_t tp, int32_t cp, int32_t ep, int32_t pp, int32_t expert_tp = 0,
            std::string order = "") {
  return Sizes{world, tp, cp, ep, pp, expert_tp, std::move(order)};
}

// Configurations for the structural and Python comparisons: each size alone, combinations,
// expert_tp different from tp, ep together with cp (two grids, so Megatron allows it), a world
// of one, and orders other than the default (pp not last where the grids' dp agree).
const std::vector<Sizes>& configurations() {
  static const std::vector<Sizes> all = [] {
    std::vector<Sizes> v;  // world, tp, cp, ep, pp[, expert_tp (0: not given)[, order]]
    v.push_back(sizes(1, 1, 1, 1, 1));
    v.push_back(sizes(8, 2, 1, 1, 2));
    v.push_back(sizes(16, 2, 1, 1, 4));
    v.push_back(sizes(16, 2, 2, 1, 2));
    v.push_back(sizes(8, 1, 1, 4, 1));
    v.push_back(sizes(16, 2, 1, 4, 2, 1));
    v.push_back(sizes(24, 2, 3, 1, 1));
    v.push_back(sizes(24, 2, 3, 2, 2));
    v.push_back(sizes(16, 2, 2, 4, 2, 1));
    v.push_back(sizes(32, 2, 2, 2, 2, 4));
    v.push_back(sizes(12, 3, 1, 2, 1, 1));
    v.push_back(sizes(24, 2, 1, 1, 4, 0, "tp-dp-pp"));
    v.push_back(sizes(8, 2, 1, 1, 2, 0, "tp-pp-dp"));
    v.push_back(sizes(16, 2, 1, 1, 2, 0, "tp-pp-cp-ep-dp"));
    v.push_back(sizes(16, 2, 2, 2, 2, 0, "tp-cp-ep-pp-dp"));
    v.push_back(sizes(48, 2, 3, 2, 2, 1, "cp-tp-dp-ep-pp"));
    v.push_back(sizes(12, 1, 3, 2, 1, 2, "dp-ep-cp-tp-pp"));
    v.push_back(sizes(7, 1, 1, 1, 7));
    return v;
  }();
  return all;
}

bool python_available() {
  return fs::exists(kPython) && fs::exists(kReference);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(megatron_examples)

// parallel_state.initialize_model_parallel's docstring: 16 GPUs g0..g15, tensor parallel 2,
// pipeline parallel 4 give 8 tensor groups, 4 pipeline groups and 8 data-parallel groups.
BOOST_AUTO_TEST_CASE(sixteen_gpus_tp2_pp4) {
  const Enumeration e = enumerate(16, R"({"tp": 2, "pp": 4})");
  const Groups tp{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}};
  const Groups pp{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
  const Groups dp{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
  BOOST_TEST(text(e.at("tp")) == text(tp));
  BOOST_TEST(text(e.at("pp")) == text(pp));
  BOOST_TEST(text(e.at("dp")) == text(dp));
  BOOST_TEST(text(e.at("dp_cp")) == text(dp));  // cp is 1: the same groups
  // Model parallel is tp x pp: all ranks of one data-parallel replica.
  BOOST_TEST(text(e.at("mp")) == text(Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
}

// The docstring of context_parallel_size: 8 GPUs, tensor parallel 4, context parallel 2 give
// the context-parallel groups [0, 4], [1, 5], [2, 6], [3, 7].
BOOST_AUTO_TEST_CASE(eight_gpus_tp4_cp2) {
  const Enumeration e = enumerate(8, R"({"tp": 4, "cp": 2})");
  BOOST_TEST(text(e.at("cp")) == text(Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  BOOST_TEST(text(e.at("tp")) == text(Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  BOOST_TEST(text(e.at("tp_cp")) == text(Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  BOOST_TEST(text(e.at("dp")) == text(Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
}

// generate_masked_orthogonal_rank_groups's docstring: sizes [tp, dp, pp] = [2, 3, 4] in the
// order tp-dp-pp give the data-parallel groups [0, 2, 4], [1, 3, 5], ..., [19, 21, 23]. The
// order leaves out cp and ep, which are 1.
BOOST_AUTO_TEST_CASE(twenty_four_ranks_tp2_pp4_order_tp_dp_pp) {
  const Enumeration e = enumerate(24, R"({"tp": 2, "pp": 4, "order": "tp-dp-pp"})");
  BOOST_TEST(text(e.at("dp")) == text(Groups{{0, 2, 4},
                                             {1, 3, 5},
                                             {6, 8, 10},
                                             {7, 9, 11},
                                             {12, 14, 16},
                                             {13, 15, 17},
                                             {18, 20, 22},
                                             {19, 21, 23}}));
}

// The expert grid: with ep 4 on 8 ranks, tp 1, each group of 4 consecutive ranks is an expert
// group, and the expert data-parallel groups join the same position of both.
BOOST_AUTO_TEST_CASE(eight_ranks_ep4) {
  const Enumeration e = enumerate(8, R"({"ep": 4})");
  BOOST_TEST(text(e.at("ep")) == text(Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  BOOST_TEST(text(e.at("expert_dp")) == text(Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  BOOST_TEST(text(e.at("dp")) == text(Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));  // the dense grid has no ep
}

BOOST_AUTO_TEST_CASE(expert_tp_defaults_to_tp) {
  const Groups pairs{{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  const Enumeration same = enumerate(8, R"({"tp": 2, "ep": 2})");
  BOOST_TEST(text(same.at("expert_tp")) == text(pairs));
  BOOST_TEST(text(same.at("ep")) == text(Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  BOOST_TEST(text(same.at("tp_ep")) == text(Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  const Enumeration one = enumerate(8, R"({"tp": 2, "ep": 2, "expert_tp": 1})");
  BOOST_TEST(text(one.at("tp")) == text(pairs));
  BOOST_TEST(text(one.at("expert_tp")) == text(Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  BOOST_TEST(text(one.at("ep")) == text(pairs));
  BOOST_TEST(text(one.at("expert_dp")) == text(Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(structure)

// topology.h: groups of one kind do not overlap, and here every kind covers the world; the
// sizes are what the options say; every kind of the README is there and no other.
BOOST_AUTO_TEST_CASE(every_kind_partitions_the_world) {
  for (const Sizes& s : configurations()) {
    BOOST_TEST_CONTEXT(s.name()) {
      const Enumeration e = enumerate(s.world, s.json());
      std::set<std::string> kinds;
      for (const auto& [kind, groups] : e) kinds.insert(kind);
      BOOST_TEST((kinds == kKinds), "kinds differ");
      const std::map<std::string, int32_t> size{
          {"tp", s.tp},
          {"cp", s.cp},
          {"dp", s.dp()},
          {"pp", s.pp},
          {"dp_cp", s.dp() * s.cp},
          {"tp_cp", s.tp * s.cp},
          {"mp", s.tp * s.pp},
          {"tp_dp_cp", s.tp * s.dp() * s.cp},
          {"ep", s.ep},
          {"expert_tp", s.etp()},
          {"expert_dp", s.edp()},
          {"tp_ep", s.etp() * s.ep},
      };
      for (const auto& [kind, groups] : e) {
        if (!size.contains(kind)) continue;
        std::vector<int32_t> seen;
        for (const auto& g : groups) {
          BOOST_TEST(static_cast<int32_t>(g.size()) == size.at(kind), kind << " group " << text(Groups{g}));
          seen.insert(seen.end(), g.begin(), g.end());
        }
        std::sort(seen.begin(), seen.end());
        std::vector<int32_t> world(static_cast<std::size_t>(s.world));
        for (int32_t r = 0; r < s.world; ++r) world[static_cast<std::size_t>(r)] = r;
        BOOST_TEST((seen == world), kind << " does not partition the world: " << text(groups));
      }
      // Both grids give the same pipeline groups (Megatron-LM asserts it): the expert grid's
      // tp x ep x pp groups are not enumerated, but its pp is the dense one by construction.
      BOOST_TEST(e.at("pp").size() == static_cast<std::size_t>(s.world / s.pp));
    }
  }
}

// Every rank enumerates the same groups (the host derives communicators from them).
BOOST_AUTO_TEST_CASE(the_same_on_every_rank) {
  const Sizes s = sizes(16, 2, 2, 4, 2, 1);
  const Enumeration first = enumerate(s.world, s.json(), 0);
  for (int32_t rank = 1; rank < s.world; ++rank) BOOST_TEST((enumerate(s.world, s.json(), rank) == first));
}

BOOST_AUTO_TEST_CASE(defaults_come_from_the_schema) {
  // {} is tp = cp = ep = pp = 1 in the order tp-cp-ep-dp-pp: one data-parallel group of all.
  const Enumeration e = enumerate(4, "{}");
  BOOST_TEST(text(e.at("dp")) == text(Groups{{0, 1, 2, 3}}));
  BOOST_TEST(text(e.at("expert_dp")) == text(Groups{{0, 1, 2, 3}}));
  BOOST_TEST(text(e.at("tp")) == text(Groups{{0}, {1}, {2}, {3}}));
  boost::json::value value = boost::json::parse("{}");
  plexus::config::validate(value, plexus::config::Schema::parse(grid().config_schema, grid().name),
                           kOptionsPath);
  BOOST_TEST(value.at("order").as_string() == "tp-cp-ep-dp-pp");
  BOOST_TEST(!value.as_object().contains("expert_tp"));  // its default is tp, which the plugin applies
}

BOOST_AUTO_TEST_SUITE_END()

// The independent Python enumeration must give the same kinds, the same groups in the same
// order, each with its ranks in the same order.
BOOST_AUTO_TEST_CASE(matches_the_python_reference,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       return python_available();
                     })) {
  for (const Sizes& s : configurations()) {
    BOOST_TEST_CONTEXT(s.name()) {
      const auto run =
          plexus::test::run_process(kPython + " " + plexus::test::quote(kReference) + " " + s.arguments());
      BOOST_TEST_REQUIRE(run.status == 0, run.output);
      const boost::json::value parsed = boost::json::parse(run.output);
      Enumeration expected;
      for (const auto& [kind, groups] : parsed.as_object()) {
        Groups& out = expected[std::string(kind)];
        for (const auto& g : groups.as_array()) {
          out.emplace_back();
          for (const auto& r : g.as_array()) out.back().push_back(static_cast<int32_t>(r.as_int64()));
        }
      }
      const Enumeration got = enumerate(s.world, s.json());
      BOOST_TEST(expected.size() == kKinds.size());
      for (const auto& [kind, groups] : expected) {
        BOOST_TEST_REQUIRE(got.contains(kind), "the plugin has no kind " << kind);
        BOOST_TEST(text(got.at(kind)) == text(groups), kind);
      }
      BOOST_TEST(got.size() == expected.size());
    }
  }
}

BOOST_AUTO_TEST_SUITE(refusals)

BOOST_AUTO_TEST_CASE(world_not_divisible_by_the_dense_grid) {
  expect_refusal(
      6, R"({"tp": 4})",
      "distributed.topology.options: world size 6 is not divisible by tp (4) x cp (1) x pp (1) = 4");
  expect_refusal(8, R"({"tp": 2, "cp": 3})", "world size 8 is not divisible by tp (2) x cp (3) x pp (1) = 6");
  expect_refusal(8, R"({"pp": 16})", "world size 8 is not divisible by tp (1) x cp (1) x pp (16) = 16");
  // Beyond int64 the product is only said to be too large.
  expect_refusal(
      8, R"({"tp": 4611686018427387904, "cp": 4})",
      "world size 8 is not divisible by tp (4611686018427387904) x cp (4) x pp (1) > 9223372036854775807");
}

BOOST_AUTO_TEST_CASE(world_not_divisible_by_the_expert_grid) {
  expect_refusal(
      8, R"({"tp": 2, "ep": 3})",
      "distributed.topology.options: world size 8 is not divisible by expert_tp (2) x ep (3) x pp (1) = 6");
  expect_refusal(8, R"({"tp": 2, "expert_tp": 8, "pp": 2})",
                 "world size 8 is not divisible by expert_tp (8) x ep (1) x pp (2) = 16");
}

BOOST_AUTO_TEST_CASE(unknown_or_repeated_names_in_order) {
  expect_refusal(
      8, R"({"order": "tp-cp-xp-dp-pp"})",
      "distributed.topology.options.order: 'tp-cp-xp-dp-pp' names 'xp', which is not a parallelism");
  expect_refusal(8, R"({"order": "tp-cp-tp-dp-pp"})",
                 "distributed.topology.options.order: 'tp-cp-tp-dp-pp' names tp twice");
  expect_refusal(8, R"({"order": ""})", "'' names '', which is not a parallelism");
  expect_refusal(8, R"({"order": "tp--dp"})", "'tp--dp' names '', which is not a parallelism");
  expect_refusal(8, R"({"order": "TP-CP-EP-DP-PP"})", "names 'TP', which is not a parallelism");
}

BOOST_AUTO_TEST_CASE(order_leaves_out_a_size_above_one) {
  expect_refusal(8, R"({"cp": 2, "order": "tp-dp-pp"})",
                 "distributed.topology.options.order: 'tp-dp-pp' leaves out cp, but cp is 2: only a "
                 "parallelism of size 1 may "
                 "be left out");
  expect_refusal(8, R"({"ep": 2, "order": "tp-cp-dp-pp"})", "'tp-cp-dp-pp' leaves out ep, but ep is 2");
  expect_refusal(4, R"({"order": "tp-cp-ep-pp"})", "'tp-cp-ep-pp' leaves out dp, but dp is 4");
  expect_refusal(8, R"({"expert_tp": 2, "ep": 4, "order": "cp-ep-dp-pp"})",
                 "'cp-ep-dp-pp' leaves out tp, but expert_tp is 2");
}

// Megatron-LM: without pp last, the two grids must agree on dp, and (whatever the order) on
// the pipeline groups.
BOOST_AUTO_TEST_CASE(pp_not_last_needs_matching_grids) {
  expect_refusal(8, R"({"tp": 2, "pp": 2, "expert_tp": 1, "order": "tp-cp-ep-pp-dp"})",
                 "distributed.topology.options.order: 'tp-cp-ep-pp-dp' does not put pp last, so with pp (2) "
                 "> 1 the expert "
                 "grid's expert_dp (4) must equal the dense grid's dp (2)");
  expect_refusal(8, R"({"tp": 2, "pp": 2, "ep": 2, "expert_tp": 1, "order": "tp-pp-cp-ep-dp"})",
                 "distributed.topology.options.order: 'tp-pp-cp-ep-dp' gives the dense and the expert grid "
                 "different pipeline "
                 "groups: the sizes before pp multiply to 2 in the dense grid and to 1 in the expert grid");
  // With pp = 1 the order of pp does not matter.
  BOOST_CHECK_NO_THROW(enumerate(8, R"({"tp": 2, "expert_tp": 1, "order": "tp-cp-ep-pp-dp"})"));
}

// The schema refuses sizes below 1 before the plugin sees them; the plugin refuses them too
// when handed a config nobody validated.
BOOST_AUTO_TEST_CASE(sizes_below_one) {
  for (const char* key : {"tp", "cp", "ep", "pp", "expert_tp"}) {
    BOOST_TEST_CONTEXT(key) {
      const std::string json = std::string("{\"") + key + "\": 0}";
      try {
        options(json);
        BOOST_ERROR("the schema accepted " << json);
      } catch (const plexus::config::ConfigError& e) {
        BOOST_TEST(e.path() == kOptionsPath + "." + key, e.what());
      }
      std::string raw = R"({"tp": 1, "cp": 1, "ep": 1, "pp": 1, "expert_tp": 1, "order": "tp-cp-ep-dp-pp"})";
      raw.replace(raw.find(std::string("\"") + key + "\": 1"), std::string(key).size() + 5,
                  std::string("\"") + key + "\": -3");
      expect_refusal(8, raw, kOptionsPath + "." + key + ": must be at least 1, got -3", false);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_world_or_rank) {
  expect_refusal(0, "{}", "world size must be at least 1, got 0");
  expect_refusal(4, "{}", "rank 4 is outside a world of 4 ranks", true, 4);
  expect_refusal(4, "{}", "rank -1 is outside a world of 4 ranks", true, -1);
}

BOOST_AUTO_TEST_SUITE_END()

// The "mimo" topology provider (plugins/topology_mimo), loaded through the real plugin host and
// called as the host calls it: Megatron-LM's heterogeneous MIMO topology test (8 ranks, an
// "images" encoder of 4 ranks with tp 2 at offset 0 and "language" of 4 ranks with tp 2 and pp 2
// at offset 4) with its groups, sizes and embedding groups; HyperCommGrid's enumeration example;
// the derived dp and expert dp; colocated modules; the promises of topology.h (each kind's groups
// are disjoint, the same on every rank, and partition the module's ranks); every refusal, by its
// message naming the modules and their spans; and `plexus topology` printing the modules and roles.
#define BOOST_TEST_MODULE topology_mimo
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

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

const std::string kOptionsPath = "distributed.topology.options";

// The kinds every module has (plugins/topology_mimo/README.md); the language module adds embd
// and pos_embd.
const std::vector<std::string> kModuleKinds{"tp",    "cp",        "dp",        "pp",       "dp_cp",
                                            "tp_cp", "mp",        "tp_dp",     "tp_dp_cp", "tp_dp_cp_pp",
                                            "ep",    "expert_tp", "expert_dp", "tp_ep",    "tp_ep_pp"};

plexus::PluginHost& host() {
  static plexus::PluginHost instance;
  static const bool loaded = [] {
    const fs::path file = std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins/libplexus_topology_mimo.so";
    if (!fs::exists(file))
      throw std::runtime_error("the topology_mimo plugin is not built: " + file.string() + " is missing");
    instance.load(file);
    return true;
  }();
  (void)loaded;
  return instance;
}

const plexus::Component& mimo() {
  return host().get(PLX_KIND_TOPOLOGY, "mimo");
}

plx_status collect(void* ctx, const char* kind, const int32_t* ranks, uint32_t count) {
  (*static_cast<Enumeration*>(ctx))[kind].emplace_back(ranks, ranks + count);
  return PLX_OK;
}

// `modules` is the JSON list of options.modules; the options are validated against the
// component's schema (defaults filled in) as the engine does before calling build.
Enumeration enumerate(int32_t world, const std::string& modules, int32_t rank = 0) {
  boost::json::value value = boost::json::parse("{\"modules\": " + modules + "}");
  const auto schema = plexus::config::Schema::parse(mimo().config_schema, mimo().name);
  plexus::config::validate(value, schema, kOptionsPath);
  plexus::ConfigHandle config(std::move(value), kOptionsPath);
  plx_topology_args args{};
  args.struct_size = sizeof(args);
  args.world_size = world;
  args.rank = rank;
  args.config = config.get();
  Enumeration out;
  const plx_group_sink sink{sizeof(plx_group_sink), 0, &out, &collect};
  plexus::check_call(mimo(), "build", mimo().as<plx_topology_v1>().build(&args, &sink));
  return out;
}

// Expects a refusal (by build, PLX_ERR_INVALID_ARGUMENT, or by the schema) whose message holds
// every one of `parts`.
void expect_refusal(int32_t world, const std::string& modules, const std::vector<std::string>& parts) {
  try {
    enumerate(world, modules);
    BOOST_ERROR("world " << world << ", modules " << modules << ": expected a refusal");
  } catch (const plexus::ComponentCallError& e) {
    BOOST_TEST_MESSAGE("refused: " << e.what());
    BOOST_TEST(e.status() == PLX_ERR_INVALID_ARGUMENT, "status " << e.status() << ": " << e.what());
    for (const std::string& part : parts)
      BOOST_TEST(std::string(e.what()).find(part) != std::string::npos,
                 "message '" << e.what() << "' should contain '" << part << "'");
  } catch (const plexus::config::ConfigError& e) {
    BOOST_TEST_MESSAGE("refused by the schema: " << e.what());
    for (const std::string& part : parts)
      BOOST_TEST(std::string(e.what()).find(part) != std::string::npos,
                 "message '" << e.what() << "' should contain '" << part << "'");
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

// Megatron's tests/unit_tests/test_mimo_hetero_topology.py layout.
const std::string kHetero =
    R"([{"name": "images", "num_ranks": 4, "tp": 2, "rank_offset": 0},
        {"name": "language", "num_ranks": 4, "tp": 2, "pp": 2, "rank_offset": 4}])";

}  // namespace

BOOST_AUTO_TEST_SUITE(megatron_examples)

// test_mimo_hetero_topology.py: the groups it lists, the sizes it asserts, the embedding groups.
BOOST_AUTO_TEST_CASE(hetero_topology_on_8_ranks) {
  const Enumeration e = enumerate(8, kHetero);
  BOOST_TEST(text(e.at("images/tp")) == "[0,1][2,3]");
  BOOST_TEST(text(e.at("images/dp")) == "[0,2][1,3]");
  BOOST_TEST(text(e.at("language/tp")) == "[4,5][6,7]");
  BOOST_TEST(text(e.at("language/pp")) == "[4,6][5,7]");
  // Sizes: encoder tp 2, pp 1, dp 2, dp_cp 2; language tp 2, pp 2, dp 1, dp_cp 1.
  BOOST_TEST(e.at("images/pp").front().size() == 1u);
  BOOST_TEST(e.at("images/dp_cp").front().size() == 2u);
  BOOST_TEST(e.at("language/dp").front().size() == 1u);
  BOOST_TEST(e.at("language/dp_cp").front().size() == 1u);
  // Embedding groups only on the language module: embd holds each pipeline's first and last
  // stage (size 2), pos_embd its first stage only (ranks 6 and 7, the last stage, are in none).
  BOOST_TEST(e.count("images/embd") == 0u);
  BOOST_TEST(e.count("images/pos_embd") == 0u);
  BOOST_TEST(text(e.at("language/embd")) == "[4,6][5,7]");
  BOOST_TEST(text(e.at("language/pos_embd")) == "[4][5]");
  // The whole module, and model parallel (tp x pp) as one replica.
  BOOST_TEST(text(e.at("language/mp")) == "[4,5,6,7]");
  BOOST_TEST(text(e.at("images/tp_dp_cp_pp")) == "[0,1,2,3]");
}

// test_hyper_comm_grid.py::test_rank_enumeration_correctness: a [2, 2, 2] grid named a, b, c has
// groups along a [0,1],[2,3],[4,5],[6,7] and along c [0,4],[1,5],[2,6],[3,7]. A module of 8 ranks
// with tp 2 and cp 2 is that grid (tp, cp, dp).
BOOST_AUTO_TEST_CASE(hyper_comm_grid_enumeration) {
  const Enumeration e = enumerate(8, R"([{"name": "language", "num_ranks": 8, "tp": 2, "cp": 2}])");
  BOOST_TEST(text(e.at("language/tp")) == "[0,1][2,3][4,5][6,7]");
  BOOST_TEST(text(e.at("language/dp")) == "[0,4][1,5][2,6][3,7]");
  BOOST_TEST(text(e.at("language/cp")) == "[0,2][1,3][4,6][5,7]");
  BOOST_TEST(text(e.at("language/dp_cp")) == "[0,2,4,6][1,3,5,7]");
}

// TestModuleGridSpecResolution: dp = num_ranks / (tp cp pp), expt_dp = num_ranks / (expt_tp ep pp),
// expt_tp 1 unless given (not tp); the expert view shares the pipeline groups.
BOOST_AUTO_TEST_CASE(derived_data_parallel_sizes) {
  const Enumeration e =
      enumerate(16, R"([{"name": "language", "num_ranks": 16, "tp": 2, "pp": 2, "ep": 2}])");
  BOOST_TEST(e.at("language/dp").front().size() == 4u);         // 16 / (2 x 1 x 2)
  BOOST_TEST(e.at("language/expert_dp").front().size() == 4u);  // 16 / (1 x 2 x 2)
  BOOST_TEST(e.at("language/expert_tp").front().size() == 1u);
  const Enumeration x =
      enumerate(16, R"([{"name": "language", "num_ranks": 16, "tp": 2, "pp": 2, "ep": 2, "expt_tp": 2}])");
  BOOST_TEST(x.at("language/expert_dp").front().size() == 2u);  // 16 / (2 x 2 x 2)
  // pp outermost in both views: the pipeline groups are the dense grid's (stride 8), and each
  // lies whole inside one expert tp_ep_pp group (expt_tp x ep x pp = 8 ranks).
  BOOST_TEST(text(x.at("language/pp")) == "[0,8][1,9][2,10][3,11][4,12][5,13][6,14][7,15]");
  for (const auto& p : x.at("language/pp")) {
    const auto holds = [&](const std::vector<int32_t>& g) {
      return std::all_of(p.begin(), p.end(),
                         [&](int32_t r) { return std::find(g.begin(), g.end(), r) != g.end(); });
    };
    BOOST_TEST(std::count_if(x.at("language/tp_ep_pp").begin(), x.at("language/tp_ep_pp").end(), holds) == 1);
  }
  BOOST_TEST(x.at("language/tp_ep_pp").front().size() == 8u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(layouts)

// Colocated: every module on the same ranks, each with its own sizes.
BOOST_AUTO_TEST_CASE(colocated_modules_have_their_own_grids) {
  const Enumeration e =
      enumerate(4, R"([{"name": "images", "num_ranks": 4}, {"name": "language", "num_ranks": 4, "tp": 2}])");
  BOOST_TEST(text(e.at("images/dp")) == "[0,1,2,3]");
  BOOST_TEST(text(e.at("images/tp")) == "[0][1][2][3]");
  BOOST_TEST(text(e.at("language/tp")) == "[0,1][2,3]");
  BOOST_TEST(text(e.at("language/dp")) == "[0,2][1,3]");
}

// topology.h's promises, for several layouts: a kind's groups are disjoint, cover exactly the
// module's ranks (embedding groups aside), and are the same whichever rank asks.
BOOST_AUTO_TEST_CASE(every_kind_partitions_its_module_on_every_rank) {
  struct Layout {
    int32_t world;
    std::string modules;
    std::map<std::string, std::set<int32_t>> ranks;  // module -> its ranks
  };
  const std::vector<Layout> layouts{
      {8, kHetero, {{"images", {0, 1, 2, 3}}, {"language", {4, 5, 6, 7}}}},
      {3,
       R"([{"name": "images", "num_ranks": 2}, {"name": "language", "num_ranks": 1, "rank_offset": 2}])",
       {{"images", {0, 1}}, {"language", {2}}}},
      {6,
       R"([{"name": "audio", "num_ranks": 2, "rank_offset": 4}, {"name": "images", "num_ranks": 2},
           {"name": "language", "num_ranks": 2, "pp": 2, "rank_offset": 2}])",
       {{"audio", {4, 5}}, {"images", {0, 1}}, {"language", {2, 3}}}},
      {4,
       R"([{"name": "images", "num_ranks": 4, "tp": 4}, {"name": "language", "num_ranks": 4, "ep": 2}])",
       {{"images", {0, 1, 2, 3}}, {"language", {0, 1, 2, 3}}}},
  };
  for (const Layout& layout : layouts) {
    BOOST_TEST_CONTEXT("world " << layout.world << ", " << layout.modules) {
      const Enumeration first = enumerate(layout.world, layout.modules, 0);
      for (int32_t r = 1; r < layout.world; ++r)
        BOOST_TEST((enumerate(layout.world, layout.modules, r) == first));
      for (const auto& [module, ranks] : layout.ranks) {
        for (const std::string& kind : kModuleKinds) {
          BOOST_TEST_CONTEXT(module << "/" << kind) {
            BOOST_TEST_REQUIRE(first.count(module + "/" + kind) == 1u);
            std::multiset<int32_t> seen;
            for (const auto& g : first.at(module + "/" + kind)) seen.insert(g.begin(), g.end());
            BOOST_TEST((std::set<int32_t>(seen.begin(), seen.end()) == ranks));
            BOOST_TEST(seen.size() == ranks.size());  // no rank twice
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(refusals)

// test_mimo_hetero_topology.py: [2, 2] grids at offsets 0 and 2 overlap; [2, 1] grids at offsets
// 0 and 4 leave ranks 2, 3, 6 and 7 in no module.
BOOST_AUTO_TEST_CASE(overlap_and_gaps_name_the_spans) {
  expect_refusal(
      8,
      R"([{"name": "images", "num_ranks": 4, "tp": 2}, {"name": "language", "num_ranks": 4, "tp": 2, "rank_offset": 2}])",
      {"modules: module grids must either fully share ranks (colocated) or be pairwise disjoint",
       "images [0, 4), language [2, 6)", "share ranks 2-3"});
  expect_refusal(
      8,
      R"([{"name": "images", "num_ranks": 2, "tp": 2}, {"name": "language", "num_ranks": 2, "rank_offset": 4}])",
      {"module grids must partition the world [0, 8) with no gaps", "images [0, 2), language [4, 6)",
       "ranks 2-3, 6-7 are in no module"});
  // Colocated modules that leave the last rank out.
  expect_refusal(3, R"([{"name": "images", "num_ranks": 2}, {"name": "language", "num_ranks": 2}])",
                 {"partition the world [0, 3)", "rank 2 is in no module"});
}

BOOST_AUTO_TEST_CASE(language_module_exactly_once) {
  expect_refusal(2, R"([{"name": "images", "num_ranks": 2}])",
                 {"exactly one module must be named \"language\"", "got none among: images"});
  expect_refusal(2, R"([{"name": "language", "num_ranks": 2}, {"name": "language", "num_ranks": 2}])",
                 {"modules[1] (language): a second module named 'language'"});
  expect_refusal(
      4, R"([{"name": "images", "num_ranks": 2}, {"name": "images", "num_ranks": 2, "rank_offset": 2}])",
      {"modules[1] (images): a second module named 'images'"});
  expect_refusal(2, "[]", {"must list the modules"});
}

BOOST_AUTO_TEST_CASE(sizes_that_do_not_divide_and_grids_outside_the_world) {
  expect_refusal(6, R"([{"name": "language", "num_ranks": 6, "tp": 4}])",
                 {"modules[0] (language): num_ranks (6) must be divisible by tp (4) x cp (1) x pp (1) = 4"});
  expect_refusal(
      6,
      R"([{"name": "images", "num_ranks": 4, "ep": 3}, {"name": "language", "num_ranks": 2, "rank_offset": 4}])",
      {"modules[0] (images): num_ranks (4) must be divisible by expt_tp (1) x ep (3) x pp (1) = 3"});
  expect_refusal(
      8, R"([{"name": "images", "num_ranks": 4}, {"name": "language", "num_ranks": 8, "rank_offset": 4}])",
      {"modules[1] (language): spans ranks [4, 12)", "the world has 8 ranks"});
}

BOOST_AUTO_TEST_CASE(names_keys_and_sizes_checked) {
  expect_refusal(2, R"([{"name": "lang/uage", "num_ranks": 2}])",
                 {"modules[0].name", "'lang/uage' cannot name a module"});
  expect_refusal(2, R"([{"name": "language", "num_ranks": 2, "tpp": 2}])",
                 {"unknown key 'tpp'", "did you mean 'tp'"});
  expect_refusal(2, R"([{"name": "language"}])", {"num_ranks"});
  expect_refusal(2, R"([{"name": "language", "num_ranks": 2, "tp": 0}])", {"modules[0].tp"});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cli)

const std::string kPlexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus";

std::string topology_command(int world, const std::string& modules, const std::string& flags = "") {
  return kPlexus + " topology " + std::to_string(world) + " " + flags + " --set " +
         plexus::test::quote(
             "distributed.topology={\"component\": \"mimo\", \"options\": {\"modules\": " + modules + "}}");
}

// --json nests each module's groups under it; the text lists each module's ranks and sizes and
// each rank's role.
BOOST_AUTO_TEST_CASE(plexus_topology_prints_modules_and_roles) {
  const auto json = plexus::test::run_process(topology_command(8, kHetero, "--json"));
  BOOST_TEST_REQUIRE(json.status == 0, json.output);
  const boost::json::value out = boost::json::parse(json.output);
  BOOST_TEST(boost::json::serialize(out.at("images").at("tp")) == "[[0,1],[2,3]]");
  BOOST_TEST(boost::json::serialize(out.at("language").at("pp")) == "[[4,6],[5,7]]");
  BOOST_TEST(boost::json::serialize(out.at("language").at("pos_embd")) == "[[4],[5]]");
  BOOST_TEST(out.as_object().size() == 2u);  // nothing but the two modules

  const auto shown = plexus::test::run_process(topology_command(8, kHetero));
  BOOST_TEST_REQUIRE(shown.status == 0, shown.output);
  BOOST_TEST_INFO(shown.output);
  BOOST_TEST(shown.output.find("modules (non-colocated: each on its own ranks)") != std::string::npos);
  BOOST_TEST(shown.output.find("images: ranks [0, 4) tp 2 cp 1 dp 2 pp 1") != std::string::npos);
  BOOST_TEST(shown.output.find("language: ranks [4, 8) tp 2 cp 1 dp 1 pp 2") != std::string::npos);
  BOOST_TEST(shown.output.find("rank 3: images tp 1 cp 0 dp 1 pp 0\n") != std::string::npos);
  BOOST_TEST(shown.output.find("rank 6: language tp 0 cp 0 dp 0 pp 1 (last stage)") != std::string::npos);

  const auto colocated = plexus::test::run_process(topology_command(
      2, R"([{"name": "images", "num_ranks": 2}, {"name": "language", "num_ranks": 2, "tp": 2}])"));
  BOOST_TEST_REQUIRE(colocated.status == 0, colocated.output);
  BOOST_TEST(colocated.output.find("colocated: every module on every rank") != std::string::npos);
  BOOST_TEST(colocated.output.find("rank 1: images tp 0 cp 0 dp 1 pp 0; language tp 1 cp 0 dp 0 pp 0") !=
                 std::string::npos,
             colocated.output);
}

BOOST_AUTO_TEST_CASE(plexus_topology_refuses_a_bad_layout) {
  const auto bad = plexus::test::run_process(topology_command(
      8, R"([{"name": "images", "num_ranks": 4}, {"name": "language", "num_ranks": 4, "rank_offset": 2}])"));
  BOOST_TEST(bad.status != 0);
  BOOST_TEST(bad.output.find("images [0, 4), language [2, 6)") != std::string::npos, bad.output);
}

// plexus-train trains one model over one grid: a module layout is refused before any data is
// read or any file written, naming the key, rather than run as data-parallel replicas.
BOOST_AUTO_TEST_CASE(plexus_train_refuses_module_grids) {
  const fs::path out = fs::temp_directory_path() / ("plexus_mimo_refusal_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const auto run = plexus::test::run_process(
      std::string(PLEXUS_BUILD_DIR) + "/bin/plexus-train --set run.output_dir=" +
      plexus::test::quote(out.string()) + " --set data.path=/nonexistent/data --set " +
      plexus::test::quote(
          R"(distributed.topology={"component": "mimo", "options": {"modules": [{"name": "language", "num_ranks": 1}]}})"));
  BOOST_TEST(run.status == 1, run.output);
  BOOST_TEST(
      run.output.find(
          "config error at distributed.topology: the topology lays out modules on grids of their own") !=
          std::string::npos,
      run.output);
  BOOST_TEST(!fs::exists(out));
}

BOOST_AUTO_TEST_SUITE_END()

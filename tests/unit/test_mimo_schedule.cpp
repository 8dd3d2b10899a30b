// MIMO's multi-module schedule (engine/mimo/mimo_schedule.hpp): every rank's calls of a step hold
// each microbatch's forward and backward once, forward first; a non-colocated rank runs 1F1B with
// as many warm-up forwards as stages after it; and the ranks of a layout, each running its own
// order with only the data dependencies of the pipeline (a stage's forward needs the previous
// stage's, its backward the next stage's backward), all finish: no layout deadlocks, with one or
// several encoders of any depth, for any number of microbatches.
#define BOOST_TEST_MODULE mimo_schedule
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "engine/mimo/mimo_schedule.hpp"

using namespace plexus;

namespace {

// The modules of a layout as the rank at (`module`, `stage`) sees them (here: that one only;
// module -1: every module here, each of one stage).
std::vector<MimoModule> layout(const std::vector<int64_t>& stages, int module, int64_t stage) {
  std::vector<MimoModule> modules(stages.size());
  for (std::size_t m = 0; m < stages.size(); ++m) {
    modules[m].encoder = m + 1 < stages.size();
    modules[m].stages = stages[m];
    modules[m].here = module < 0 || static_cast<int>(m) == module;
    modules[m].stage = static_cast<int>(m) == module ? stage : 0;
  }
  return modules;
}

using Done = std::set<std::tuple<MimoOp::Kind, std::size_t, int64_t, uint32_t>>;  // kind, module, stage, k

// Whether (module m, stage s)'s op may run given what every rank has done.
bool ready(const std::vector<int64_t>& stages, const MimoOp& op, int64_t s, const Done& done) {
  const std::size_t lm = stages.size() - 1;
  const auto has = [&](MimoOp::Kind kind, std::size_t m, int64_t stage) {
    return done.contains({kind, m, stage, op.microbatch});
  };
  using K = MimoOp::Kind;
  if (op.kind == K::forward) {
    if (s > 0) return has(K::forward, op.module, s - 1);
    if (op.module != lm) return true;
    for (std::size_t e = 0; e < lm; ++e)  // the splice needs every encoder's last stage
      if (!has(K::forward, e, stages[e] - 1)) return false;
    return true;
  }
  if (s + 1 < stages[op.module]) return has(K::backward, op.module, s + 1);
  if (op.module == lm) return has(K::forward, lm, s);
  return has(K::backward, lm, 0);  // an encoder's last stage waits for the spliced rows' gradient
}

using Schedule = std::vector<MimoOp> (*)(const std::vector<MimoModule>&, uint32_t, bool);

// Runs every rank's order (`schedule`'s), any rank whose next call is ready going on, until all
// are done or none can move. Returns the calls left undone.
std::size_t simulate(const std::vector<int64_t>& stages, uint32_t microbatches,
                     Schedule schedule = mimo_schedule) {
  struct Rank {
    std::size_t module;
    int64_t stage;
    std::vector<MimoOp> ops;
    std::size_t next = 0;
  };
  std::vector<Rank> ranks;
  for (std::size_t m = 0; m < stages.size(); ++m)
    for (int64_t s = 0; s < stages[m]; ++s)
      ranks.push_back({m, s, schedule(layout(stages, static_cast<int>(m), s), microbatches, true)});
  Done done;
  for (bool moved = true; moved;) {
    moved = false;
    for (Rank& r : ranks)
      while (r.next < r.ops.size() && ready(stages, r.ops[r.next], r.stage, done)) {
        const MimoOp& op = r.ops[r.next++];
        done.insert({op.kind, op.module, r.stage, op.microbatch});
        moved = true;
      }
  }
  std::size_t left = 0;
  for (const Rank& r : ranks) left += r.ops.size() - r.next;
  return left;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_rank_runs_each_microbatch_once_forward_first) {
  for (uint32_t microbatches : {1u, 3u, 8u})
    for (int module : {-1, 0, 1})
      for (int64_t stage = 0; stage < (module < 0 ? 1 : 2); ++stage) {
        const std::vector<MimoOp> ops = mimo_schedule(
            layout({module < 0 ? 1 : 2, module < 0 ? 1 : 2}, module, stage), microbatches, true);
        std::map<std::pair<std::size_t, uint32_t>, std::vector<MimoOp::Kind>> seen;
        for (const MimoOp& op : ops) seen[{op.module, op.microbatch}].push_back(op.kind);
        BOOST_TEST(seen.size() == (module < 0 ? 2u : 1u) * microbatches);
        for (const auto& [key, kinds] : seen)
          BOOST_TEST((kinds == std::vector<MimoOp::Kind>{MimoOp::Kind::forward, MimoOp::Kind::backward}));
      }
}

BOOST_AUTO_TEST_CASE(colocated_runs_each_microbatch_through_encoders_and_back) {
  using K = MimoOp::Kind;
  const std::vector<MimoOp> ops = mimo_schedule(layout({1, 1, 1}, -1, 0), 2, true);
  const std::vector<MimoOp> expected{{K::forward, 0, 0},  {K::forward, 1, 0},  {K::forward, 2, 0},
                                     {K::backward, 2, 0}, {K::backward, 1, 0}, {K::backward, 0, 0},
                                     {K::forward, 0, 1},  {K::forward, 1, 1},  {K::forward, 2, 1},
                                     {K::backward, 2, 1}, {K::backward, 1, 1}, {K::backward, 0, 1}};
  BOOST_TEST((ops == expected));
  BOOST_TEST(mimo_schedule(layout({1, 1}, -1, 0), 3, false).size() == 6u);  // evaluation: forwards
}

// The encoder's 2 stages then the language model's 3: places 0-4; warm-up forwards are the
// stages after a rank's place, at most the microbatches.
BOOST_AUTO_TEST_CASE(one_f_one_b_warms_up_by_the_stages_after_it) {
  const std::vector<int64_t> stages{2, 3};
  BOOST_TEST(mimo_pipeline_stages(layout(stages, 0, 0)) == 5);
  for (int module : {0, 1})
    for (int64_t s = 0; s < stages[static_cast<std::size_t>(module)]; ++s) {
      const auto modules = layout(stages, module, s);
      const int64_t place = mimo_pipeline_place(modules, static_cast<std::size_t>(module), s);
      BOOST_TEST(place == (module == 0 ? s : 2 + s));
      for (uint32_t microbatches : {2u, 8u}) {
        const std::vector<MimoOp> ops = mimo_schedule(modules, microbatches, true);
        uint32_t warmup = 0;
        while (ops[warmup].kind == MimoOp::Kind::forward && warmup < ops.size() - 1) ++warmup;
        const auto expected = std::min<int64_t>(microbatches, 5 - place - 1);
        // The steady state begins with a forward: the forwards before the first backward are the
        // warm-up's and, unless every microbatch warmed up, one more.
        BOOST_TEST(warmup == (expected == microbatches ? expected : expected + 1));
      }
    }
}

BOOST_AUTO_TEST_CASE(no_layout_deadlocks) {
  for (const std::vector<int64_t>& stages : std::vector<std::vector<int64_t>>{
           {1, 1}, {1, 2}, {2, 1}, {2, 2}, {1, 4}, {3, 2}, {1, 3, 2}, {2, 1, 3}})
    for (uint32_t microbatches : {1u, 2u, 3u, 4u, 7u})
      BOOST_TEST(simulate(stages, microbatches) == 0u,
                 "stages " << stages.size() << " modules, " << microbatches << " microbatches");
}

// The check itself can fail: ranks that run every backward before their forwards never finish.
std::vector<MimoOp> backwards_first(const std::vector<MimoModule>& modules, uint32_t microbatches,
                                    bool training) {
  std::vector<MimoOp> ops = mimo_schedule(modules, microbatches, training);
  std::stable_partition(ops.begin(), ops.end(),
                        [](const MimoOp& op) { return op.kind == MimoOp::Kind::backward; });
  return ops;
}

BOOST_AUTO_TEST_CASE(the_simulation_finds_a_deadlock) {
  BOOST_TEST(simulate({1, 2}, 3, backwards_first) > 0u);
  BOOST_TEST(simulate({1, 2}, 3) == 0u);
}

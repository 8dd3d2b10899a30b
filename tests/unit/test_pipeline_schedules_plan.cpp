#define BOOST_TEST_MODULE unit_pipeline_schedules_plan
#include <boost/test/unit_test.hpp>

// The pipeline schedules as plans (schedule_plan.hpp), without an engine: Megatron's counts and
// schedule table, the order rules every rank's plan keeps (each (microbatch, chunk) forwarded and
// backwarded once, forward before backward, receives before the computation that needs them,
// sends right after theirs, no transfer without a peer), the memory bound, and all P ranks
// simulated together with their transfers matched, which proves the plans cannot deadlock.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "schedule_plan.hpp"

namespace ps = plexus::pipeline_schedules;
using ps::Op;
using ps::OpKind;

namespace {

bool is_compute(const Op& op) {
  return op.kind == OpKind::forward || op.kind == OpKind::backward;
}

// The valid interleaved shapes of a grid: N in [P, M], M % N 0 or >= P.
struct Grid {
  uint32_t P, M, V, N;
};
std::vector<Grid> interleaved_grid() {
  std::vector<Grid> grid;
  for (uint32_t P = 2; P <= 5; ++P)
    for (uint32_t V = 2; V <= 4; ++V)
      for (uint32_t M = P; M <= 3 * P + 2; ++M)
        for (uint32_t N = P; N <= M; ++N) {
          const uint32_t rest = M % N;
          if (rest == 0 || rest >= P) grid.push_back({P, M, V, N});
        }
  return grid;
}

// The computation steps of a plan: each forward or backward, a combined pair as one step.
struct Step {
  std::optional<Op> forward, backward;
};
std::vector<Step> compute_steps(const std::vector<Op>& ops) {
  std::vector<Step> steps;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.kind == OpKind::forward && op.combined) {
      steps.push_back({op, ops.at(i + 1)});
      ++i;
    } else if (op.kind == OpKind::forward) {
      steps.push_back({op, std::nullopt});
    } else if (op.kind == OpKind::backward) {
      steps.push_back({std::nullopt, op});
    }
  }
  return steps;
}

// The order rules of one rank's plan (P ranks, V chunks each). Failures are reported with the
// rank and the offending operation.
void check_rank_plan(const std::vector<Op>& ops, uint32_t P, uint32_t r, uint32_t M, uint32_t V) {
  using Key = std::pair<uint32_t, uint32_t>;  // (microbatch, chunk)
  std::map<Key, std::size_t> fwd_at, bwd_at;
  std::map<std::pair<OpKind, Key>, std::size_t> transfer_at;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const Key key{op.microbatch, op.chunk};
    BOOST_TEST_REQUIRE(op.microbatch < M, op);
    BOOST_TEST_REQUIRE(op.chunk < V, op);
    if (op.kind == OpKind::forward) {
      BOOST_TEST(fwd_at.emplace(key, i).second, "forwarded twice: " << op);
    } else if (op.kind == OpKind::backward) {
      BOOST_TEST(bwd_at.emplace(key, i).second, "backwarded twice: " << op);
      BOOST_TEST(fwd_at.count(key) == 1u, "backward before its forward: " << op);
    } else {
      BOOST_TEST(transfer_at.emplace(std::pair{op.kind, key}, i).second, "transferred twice: " << op);
      BOOST_TEST(!op.combined);
    }
    // No transfer without a peer: the embedding's chunk neither receives input nor sends its
    // input's gradient; the head's chunk neither sends output nor receives its gradient.
    const bool first = ps::holds_embedding(P, r, op.chunk), last = ps::holds_head(P, r, V, op.chunk);
    if (op.kind == OpKind::recv_forward || op.kind == OpKind::send_backward)
      BOOST_TEST(!first, "no peer: " << op);
    if (op.kind == OpKind::send_forward || op.kind == OpKind::recv_backward)
      BOOST_TEST(!last, "no peer: " << op);
  }
  // Every (microbatch, chunk) forwarded and backwarded exactly once.
  BOOST_TEST(fwd_at.size() == std::size_t{M} * V);
  BOOST_TEST(bwd_at.size() == std::size_t{M} * V);

  for (const auto& entry : fwd_at) {
    // Named copies, not structured bindings: lambdas below capture them (clang++ 14 cannot
    // capture a structured binding).
    const auto key = entry.first;
    const std::size_t f = entry.second;
    const auto [mb, chunk] = key;
    const std::size_t b = bwd_at.at(key);
    auto at = [&](OpKind kind) -> std::optional<std::size_t> {
      const auto it = transfer_at.find({kind, key});
      return it == transfer_at.end() ? std::nullopt : std::optional<std::size_t>(it->second);
    };
    BOOST_TEST_CONTEXT("rank " << r << ", mb " << mb << ", chunk " << chunk) {
      BOOST_TEST(f < b, "forward before backward");
      // Exactly the transfers that have a peer.
      const bool first = ps::holds_embedding(P, r, chunk), last = ps::holds_head(P, r, V, chunk);
      BOOST_TEST(at(OpKind::recv_forward).has_value() == !first);
      BOOST_TEST(at(OpKind::send_backward).has_value() == !first);
      BOOST_TEST(at(OpKind::send_forward).has_value() == !last);
      BOOST_TEST(at(OpKind::recv_backward).has_value() == !last);
      // Receives before the computation that needs them.
      if (const auto rf = at(OpKind::recv_forward)) BOOST_TEST(*rf < f);
      if (const auto rb = at(OpKind::recv_backward)) BOOST_TEST(*rb < b);
      // Sends right after their computation: only the step's own computation and sends between.
      auto right_after = [&](std::size_t compute, std::size_t send) {
        if (send < compute) return false;
        for (std::size_t k = compute + 1; k < send; ++k) {
          const Op& o = ops[k];
          const bool same_step = is_compute(o)
                                     ? o.combined && ops[compute].combined
                                     : o.kind == OpKind::send_forward || o.kind == OpKind::send_backward;
          if (!same_step) return false;
        }
        return true;
      };
      if (const auto sf = at(OpKind::send_forward)) BOOST_TEST(right_after(f, *sf));
      if (const auto sb = at(OpKind::send_backward)) BOOST_TEST(right_after(b, *sb));
    }
  }
}

// The most virtual microbatches in flight on a rank: forward done, backward not yet.
uint32_t max_in_flight(const std::vector<Op>& ops) {
  uint32_t now = 0, most = 0;
  for (const Op& op : ops) {
    if (op.kind == OpKind::forward) most = std::max(most, ++now);
    if (op.kind == OpKind::backward) --now;
  }
  return most;
}

// All P ranks' plans run together in a simple event model. Sends and receives only start a
// transfer (they never block); a computation blocks until each tensor it needs has been received,
// i.e. its receive was posted by this rank (else the plan is wrong) and the peer has made the
// matching send. A combined pair needs both its tensors before it starts, and makes its sends
// after both ran (both conservative: the engine needs the forward's input only at the first
// forward stage and sends as each chain ends). Transfers are named by the model chunk they leave
// (k = chunk * P + rank): activations to k + 1, gradients to k - 1, around the ring. Returns an
// empty string when every rank finishes, else what is stuck.
struct Simulation {
  uint32_t P, V;
  std::vector<std::vector<Op>> plans;

  // (direction 'F' or 'B', microbatch, model chunk it leaves)
  using Message = std::tuple<char, uint32_t, uint32_t>;

  std::string run() {
    std::vector<std::size_t> pc(P, 0);
    std::set<Message> sent;
    std::vector<std::set<Message>> posted(P);
    std::vector<std::set<std::pair<uint32_t, uint32_t>>> forwarded(P);
    // Per (sender rank, receiver rank, direction): messages in send order and in receive order.
    std::map<std::tuple<uint32_t, uint32_t, char>, std::vector<Message>> send_order, recv_order;
    const uint32_t K = P * V;
    auto model_chunk = [&](uint32_t r, const Op& op) { return op.chunk * P + r; };
    auto rank_of = [&](uint32_t k) { return k % P; };
    std::ostringstream problems;

    // Whether the tensor a computation needs is there; records a plan error when the receive
    // was never posted.
    auto available = [&](uint32_t r, const Message& m) {
      if (posted[r].count(m) == 0) {
        problems << "rank " << r << " computes before posting the receive of " << std::get<0>(m) << "("
                 << std::get<1>(m) << ", " << std::get<2>(m) << "); ";
        return false;
      }
      return sent.count(m) == 1;
    };
    auto needs_forward = [&](uint32_t r, const Op& op) {
      const uint32_t k = model_chunk(r, op);
      return k == 0 || available(r, {'F', op.microbatch, k - 1});
    };
    auto needs_backward = [&](uint32_t r, const Op& op) {
      const uint32_t k = model_chunk(r, op);
      if (forwarded[r].count({op.microbatch, op.chunk}) == 0) {
        problems << "rank " << r << " runs " << ps::to_string(op) << " before its forward; ";
        return false;
      }
      return k == K - 1 || available(r, {'B', op.microbatch, k + 1});
    };

    bool progressed = true;
    while (progressed) {
      progressed = false;
      for (uint32_t r = 0; r < P; ++r) {
        const std::vector<Op>& ops = plans[r];
        while (pc[r] < ops.size()) {
          const Op& op = ops[pc[r]];
          const uint32_t k = model_chunk(r, op);
          if (op.kind == OpKind::send_forward || op.kind == OpKind::send_backward) {
            const bool fwd = op.kind == OpKind::send_forward;
            const Message m{fwd ? 'F' : 'B', op.microbatch, k};
            if (!sent.insert(m).second)
              problems << "rank " << r << " sends " << ps::to_string(op) << " twice; ";
            send_order[{r, rank_of(fwd ? k + 1 : k + K - 1), std::get<0>(m)}].push_back(m);
            ++pc[r];
          } else if (op.kind == OpKind::recv_forward || op.kind == OpKind::recv_backward) {
            const bool fwd = op.kind == OpKind::recv_forward;
            const Message m{fwd ? 'F' : 'B', op.microbatch, fwd ? k - 1 : k + 1};
            posted[r].insert(m);
            recv_order[{rank_of(fwd ? k + K - 1 : k + 1), r, std::get<0>(m)}].push_back(m);
            ++pc[r];
          } else if (op.kind == OpKind::forward && op.combined) {
            const Op& b = ops.at(pc[r] + 1);
            // The pair's backward needs its own forward done before the pair, not this one.
            if (!problems.str().empty() || !needs_forward(r, op) || !needs_backward(r, b)) break;
            forwarded[r].insert({op.microbatch, op.chunk});
            pc[r] += 2;
          } else if (op.kind == OpKind::forward) {
            if (!problems.str().empty() || !needs_forward(r, op)) break;
            forwarded[r].insert({op.microbatch, op.chunk});
            ++pc[r];
          } else {
            if (!problems.str().empty() || !needs_backward(r, op)) break;
            ++pc[r];
          }
          progressed = true;
        }
      }
      if (!problems.str().empty()) return problems.str();
    }
    for (uint32_t r = 0; r < P; ++r)
      if (pc[r] < plans[r].size())
        problems << "rank " << r << " is stuck at " << ps::to_string(plans[r][pc[r]]) << " (operation "
                 << pc[r] << " of " << plans[r].size() << "); ";
    if (!problems.str().empty()) return "deadlock: " + problems.str();
    // Every send received and every receive sent, in the same order on each link and direction,
    // so an engine that matches transfers in the order they are posted pairs them right.
    if (send_order != recv_order)
      return "the sends and receives of a link differ or come in different orders";
    return {};
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(counts)

// Non-interleaved: warmup = min(P - r - 1, M), steady = M - warmup, cooldown = warmup; the plan's
// computations are exactly warmup forwards, steady (forward, backward) pairs and cooldown
// backwards, forward i + warmup paired with backward i (the oldest in flight).
BOOST_AUTO_TEST_CASE(one_f_one_b_counts_and_shape) {
  for (uint32_t P = 1; P <= 6; ++P)
    for (uint32_t r = 0; r < P; ++r)
      for (uint32_t M = 1; M <= 10; ++M) {
        BOOST_TEST_CONTEXT("P " << P << ", r " << r << ", M " << M) {
          const ps::Counts c = ps::one_f_one_b_counts(P, r, M);
          const uint32_t w = std::min(P - r - 1, M);
          BOOST_TEST(c.total == M);
          BOOST_TEST(c.warmup == w);
          BOOST_TEST(c.steady == M - w);
          BOOST_TEST(c.cooldown == w);
          std::vector<Op> expected;
          for (uint32_t i = 0; i < w; ++i) expected.push_back({OpKind::forward, i, 0});
          for (uint32_t i = 0; i + w < M; ++i) {
            expected.push_back({OpKind::forward, i + w, 0});
            expected.push_back({OpKind::backward, i, 0});
          }
          for (uint32_t i = M - w; i < M; ++i) expected.push_back({OpKind::backward, i, 0});
          std::vector<Op> computed;
          for (const Op& op : ps::one_f_one_b(P, r, M))
            if (is_compute(op)) computed.push_back(op);
          BOOST_TEST(computed == expected, boost::test_tools::per_element());
        }
      }
}

// Interleaved: total = M V; warmup = (P - r - 1) * 2 + (V - 1) * N (+1 with the overlap), capped
// at total; the plan's computations follow the schedule table (backward with chunk V - 1 - chunk):
// warmup forwards, steady pairs (combined with the overlap), cooldown backwards.
BOOST_AUTO_TEST_CASE(interleaved_counts_and_shape) {
  std::size_t checked = 0;
  for (const Grid& g : interleaved_grid())
    for (uint32_t r = 0; r < g.P; ++r)
      for (const bool overlap : {false, true}) {
        BOOST_TEST_CONTEXT("P " << g.P << ", r " << r << ", M " << g.M << ", V " << g.V << ", N " << g.N
                                << ", overlap " << overlap) {
          const ps::Counts c = ps::interleaved_counts(g.P, r, g.M, g.V, g.N, overlap);
          const uint32_t total = g.M * g.V;
          const uint32_t uncapped = (g.P - r - 1) * 2 + (g.V - 1) * g.N + (overlap ? 1 : 0);
          const uint32_t w = std::min(uncapped, total);
          BOOST_TEST(c.total == total);
          BOOST_TEST(c.warmup == w);
          BOOST_TEST(c.steady == total - w);
          BOOST_TEST(c.cooldown == w);
          BOOST_TEST(c.all_in_warmup == (uncapped >= total));

          const std::vector<ps::VirtualMicrobatch> table = ps::schedule_table(g.M, g.V, g.N);
          auto F = [&](uint32_t k, bool combined) {
            return Op{OpKind::forward, table[k].microbatch, table[k].chunk, combined};
          };
          auto B = [&](uint32_t k, bool combined) {
            return Op{OpKind::backward, table[k].microbatch, g.V - 1 - table[k].chunk, combined};
          };
          std::vector<Op> expected;
          for (uint32_t k = 0; k < w; ++k) expected.push_back(F(k, false));
          for (uint32_t k = 0; k + w < total; ++k) {
            expected.push_back(F(k + w, overlap));
            expected.push_back(B(k, overlap));
          }
          for (uint32_t k = total - w; k < total; ++k) expected.push_back(B(k, false));
          std::vector<Op> computed;
          for (const Op& op : ps::interleaved(g.P, r, g.M, g.V, g.N, overlap))
            if (is_compute(op)) computed.push_back(op);
          BOOST_TEST(computed == expected, boost::test_tools::per_element());
          ++checked;
        }
      }
  BOOST_TEST_MESSAGE("checked " << checked << " interleaved shapes");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(table)

// Megatron's own example (schedules.py): PP2 N3 M5 V2.
BOOST_AUTO_TEST_CASE(megatron_example_pp2_n3_m5_v2) {
  const std::vector<ps::VirtualMicrobatch> table = ps::schedule_table(5, 2, 3);
  std::vector<uint32_t> mbs, chunks;
  for (const auto& v : table) {
    mbs.push_back(v.microbatch);
    chunks.push_back(v.chunk);
  }
  const std::vector<uint32_t> expected_mbs{0, 1, 2, 0, 1, 2, 3, 4, 3, 4};
  const std::vector<uint32_t> expected_chunks{0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
  BOOST_TEST(mbs == expected_mbs, boost::test_tools::per_element());
  BOOST_TEST(chunks == expected_chunks, boost::test_tools::per_element());
}

// Groups of N, chunk-major inside a group; the last group takes the remainder; every (mb, chunk)
// once.
BOOST_AUTO_TEST_CASE(groups_and_remainder) {
  // M 8, N 3, V 2: groups {0,1,2} {3,4,5} {6,7}.
  const std::vector<ps::VirtualMicrobatch> t = ps::schedule_table(8, 2, 3);
  const std::vector<ps::VirtualMicrobatch> expected{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1},
                                                    {3, 0}, {4, 0}, {5, 0}, {3, 1}, {4, 1}, {5, 1},
                                                    {6, 0}, {7, 0}, {6, 1}, {7, 1}};
  BOOST_TEST(t == expected, boost::test_tools::per_element());
  // N = M: one group, chunk after chunk.
  const std::vector<ps::VirtualMicrobatch> one = ps::schedule_table(3, 3, 3);
  BOOST_TEST(one.size() == 9u);
  for (uint32_t k = 0; k < one.size(); ++k) BOOST_TEST((one[k] == ps::VirtualMicrobatch{k % 3, k / 3}));
  for (const Grid& g : interleaved_grid()) {
    std::set<std::pair<uint32_t, uint32_t>> seen;
    for (const auto& v : ps::schedule_table(g.M, g.V, g.N)) seen.insert({v.microbatch, v.chunk});
    BOOST_TEST(seen.size() == std::size_t{g.M} * g.V);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(order_rules)

BOOST_AUTO_TEST_CASE(one_f_one_b_every_rank) {
  for (uint32_t P = 1; P <= 6; ++P)
    for (uint32_t r = 0; r < P; ++r)
      for (uint32_t M = 1; M <= 10; ++M) BOOST_TEST_CONTEXT("P " << P << ", M " << M) {
          check_rank_plan(ps::one_f_one_b(P, r, M), P, r, M, 1);
        }
}

BOOST_AUTO_TEST_CASE(interleaved_every_rank) {
  for (const Grid& g : interleaved_grid())
    for (uint32_t r = 0; r < g.P; ++r)
      for (const bool overlap : {false, true})
        BOOST_TEST_CONTEXT("P " << g.P << ", M " << g.M << ", V " << g.V << ", N " << g.N << ", overlap "
                                << overlap) {
          check_rank_plan(ps::interleaved(g.P, r, g.M, g.V, g.N, overlap), g.P, r, g.M, g.V);
        }
}

// Receives are posted one computation step ahead: before the computation of the step preceding
// the one that needs them (or first of all, for the first step), so the transfer travels while
// that step computes.
void check_receives_one_step_ahead(const std::vector<Op>& ops) {
  std::vector<std::size_t> compute_index;  // position of each computation step's first op
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (is_compute(ops[i]) && !(ops[i].kind == OpKind::backward && ops[i].combined))
      compute_index.push_back(i);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.kind != OpKind::recv_forward && op.kind != OpKind::recv_backward) continue;
    const OpKind needs = op.kind == OpKind::recv_forward ? OpKind::forward : OpKind::backward;
    const auto consumer = std::find_if(ops.begin(), ops.end(), [&](const Op& o) {
      return o.kind == needs && o.microbatch == op.microbatch && o.chunk == op.chunk;
    });
    const auto step = std::upper_bound(compute_index.begin(), compute_index.end(),
                                       static_cast<std::size_t>(consumer - ops.begin())) -
                      compute_index.begin() - 1;  // the consumer's step
    // Posted after the computation two steps back and before the previous step's.
    if (step >= 1) BOOST_TEST(i < compute_index[static_cast<std::size_t>(step) - 1], ps::to_string(op));
    if (step >= 2) BOOST_TEST(i > compute_index[static_cast<std::size_t>(step) - 2], ps::to_string(op));
  }
}

BOOST_AUTO_TEST_CASE(receives_are_posted_one_step_ahead) {
  for (uint32_t P = 2; P <= 5; ++P)
    for (uint32_t r = 0; r < P; ++r)
      for (uint32_t M = 1; M <= 8; ++M) check_receives_one_step_ahead(ps::one_f_one_b(P, r, M));
  for (const Grid& g : interleaved_grid())
    for (uint32_t r = 0; r < g.P; ++r)
      for (const bool overlap : {false, true})
        check_receives_one_step_ahead(ps::interleaved(g.P, r, g.M, g.V, g.N, overlap));
}

// Megatron's memory bound: on rank r, 1F1B keeps at most P - r microbatches in flight (forward
// done, backward not); the interleaved schedule at most warmup + 1 virtual microbatches (its
// counterpart: (P - r - 1) * 2 + (V - 1) * N + 1, one more with the overlap).
BOOST_AUTO_TEST_CASE(in_flight_bound) {
  for (uint32_t P = 1; P <= 6; ++P)
    for (uint32_t r = 0; r < P; ++r)
      for (uint32_t M = 1; M <= 10; ++M) {
        const uint32_t most = max_in_flight(ps::one_f_one_b(P, r, M));
        BOOST_TEST(most <= P - r);
        BOOST_TEST(most == std::min(P - r, M));
      }
  for (const Grid& g : interleaved_grid())
    for (uint32_t r = 0; r < g.P; ++r)
      for (const bool overlap : {false, true}) {
        const ps::Counts c = ps::interleaved_counts(g.P, r, g.M, g.V, g.N, overlap);
        BOOST_TEST(max_in_flight(ps::interleaved(g.P, r, g.M, g.V, g.N, overlap)) ==
                   std::min(c.total, c.warmup + 1));
      }
}

// With the overlap, the two halves of every combined pair are independent: different virtual
// microbatches, and the backward's own forward ran in an earlier step (what Megatron's extra
// warmup forward is for). Without it the same steady iteration may forward and backward the same
// (microbatch, chunk), which a pair could not merge.
BOOST_AUTO_TEST_CASE(combined_pairs_are_independent) {
  bool needed_somewhere = false;
  for (const Grid& g : interleaved_grid())
    for (uint32_t r = 0; r < g.P; ++r) {
      for (const Step& s : compute_steps(ps::interleaved(g.P, r, g.M, g.V, g.N, true))) {
        if (!s.forward || !s.backward) continue;
        BOOST_TEST(
            !(s.forward->microbatch == s.backward->microbatch && s.forward->chunk == s.backward->chunk));
      }
      // The same shape without the +1: some steady iteration depends on its own forward.
      const std::vector<Op> plain = ps::interleaved(g.P, r, g.M, g.V, g.N, false);
      for (std::size_t i = 0; i + 1 < plain.size(); ++i)
        if (plain[i].kind == OpKind::forward) {
          auto next =
              std::find_if(plain.begin() + static_cast<std::ptrdiff_t>(i) + 1, plain.end(), is_compute);
          if (next != plain.end() && next->kind == OpKind::backward &&
              next->microbatch == plain[i].microbatch && next->chunk == plain[i].chunk)
            needed_somewhere = true;
        }
    }
  BOOST_TEST(needed_somewhere, "the extra warmup forward is needed for some shape");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(all_ranks)

BOOST_AUTO_TEST_CASE(one_f_one_b_never_deadlocks) {
  for (uint32_t P = 1; P <= 8; ++P)
    for (uint32_t M = 1; M <= 12; ++M) {
      Simulation sim{P, 1, {}};
      for (uint32_t r = 0; r < P; ++r) sim.plans.push_back(ps::one_f_one_b(P, r, M));
      const std::string stuck = sim.run();
      BOOST_TEST(stuck.empty(), "P " << P << ", M " << M << ": " << stuck);
    }
}

BOOST_AUTO_TEST_CASE(interleaved_never_deadlocks) {
  std::size_t shapes = 0;
  for (const Grid& g : interleaved_grid())
    for (const bool overlap : {false, true}) {
      Simulation sim{g.P, g.V, {}};
      for (uint32_t r = 0; r < g.P; ++r) sim.plans.push_back(ps::interleaved(g.P, r, g.M, g.V, g.N, overlap));
      const std::string stuck = sim.run();
      BOOST_TEST(stuck.empty(), "P " << g.P << ", M " << g.M << ", V " << g.V << ", N " << g.N << ", overlap "
                                     << overlap << ": " << stuck);
      ++shapes;
    }
  BOOST_TEST_MESSAGE("simulated " << shapes << " interleaved pipelines");
}

// The simulation does catch a deadlock: two ranks whose first computations wait on each other.
BOOST_AUTO_TEST_CASE(the_simulation_detects_a_deadlock) {
  Simulation sim{2, 1, {}};
  // Rank 0 sends microbatch 0's activation only after its backward, which needs the gradient rank
  // 1 computes from that very activation: nobody moves.
  sim.plans.push_back({{OpKind::recv_backward, 0, 0},
                       {OpKind::forward, 0, 0},
                       {OpKind::backward, 0, 0},
                       {OpKind::send_forward, 0, 0}});
  sim.plans.push_back({{OpKind::recv_forward, 0, 0},
                       {OpKind::forward, 0, 0},
                       {OpKind::backward, 0, 0},
                       {OpKind::send_backward, 0, 0}});
  const std::string stuck = sim.run();
  BOOST_TEST(stuck.find("deadlock") != std::string::npos, stuck);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(without_pipelining)

// At P = 1 both schedules are gradient accumulation: forward(i), backward(i), whatever the
// component, so a config moves between pipeline sizes unchanged.
BOOST_AUTO_TEST_CASE(p1_is_gradient_accumulation) {
  for (uint32_t M = 1; M <= 6; ++M) {
    std::vector<Op> expected;
    for (uint32_t i = 0; i < M; ++i) {
      expected.push_back({OpKind::forward, i, 0});
      expected.push_back({OpKind::backward, i, 0});
    }
    ps::Shape shape;
    shape.microbatches = M;
    BOOST_TEST(ps::plan(ps::Schedule::one_f_one_b, shape) == expected, boost::test_tools::per_element());
    BOOST_TEST(ps::plan(ps::Schedule::interleaved, shape) == expected, boost::test_tools::per_element());
    shape.group_size = 5;  // N means nothing without virtual stages
    BOOST_TEST(ps::plan(ps::Schedule::interleaved, shape) == expected, boost::test_tools::per_element());
  }
}

// With the overlap at P = 1: Megatron's no-pipelining combined 1F1B, combined_1f1b's phases:
// forward(0) alone, forward(i) with backward(i - 1), backward(M - 1) alone.
BOOST_AUTO_TEST_CASE(p1_with_overlap_is_combined_1f1b) {
  for (uint32_t M = 1; M <= 6; ++M) {
    std::vector<Op> expected{{OpKind::forward, 0, 0}};
    for (uint32_t i = 1; i < M; ++i) {
      expected.push_back({OpKind::forward, i, 0, true});
      expected.push_back({OpKind::backward, i - 1, 0, true});
    }
    expected.push_back({OpKind::backward, M - 1, 0});
    ps::Shape shape;
    shape.microbatches = M;
    shape.overlap = true;
    BOOST_TEST(ps::plan(ps::Schedule::one_f_one_b, shape) == expected, boost::test_tools::per_element());
    BOOST_TEST(ps::plan(ps::Schedule::interleaved, shape) == expected, boost::test_tools::per_element());
  }
}

// interleaved_1f1b with one chunk per rank at P > 1 is the non-interleaved 1F1B (Megatron: one
// virtual stage is no virtual pipeline).
BOOST_AUTO_TEST_CASE(one_chunk_interleaved_is_1f1b) {
  for (uint32_t P = 2; P <= 4; ++P)
    for (uint32_t r = 0; r < P; ++r)
      for (uint32_t M = 1; M <= 7; ++M) {
        ps::Shape shape{P, r, M, 1, std::nullopt, false};
        BOOST_TEST(ps::plan(ps::Schedule::interleaved, shape) == ps::one_f_one_b(P, r, M));
      }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(refusals)

std::string refusal(ps::Schedule schedule, const ps::Shape& shape) {
  try {
    ps::plan(schedule, shape);
  } catch (const ps::ScheduleError& e) {
    BOOST_TEST_MESSAGE("refused: " << e.what());
    return e.what();
  }
  return {};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

BOOST_AUTO_TEST_CASE(one_f_one_b_with_chunks_suggests_interleaved) {
  const std::string text = refusal(ps::Schedule::one_f_one_b, {4, 1, 8, 2, std::nullopt, false});
  BOOST_TEST(has(text, "scheduler \"1f1b\""));
  BOOST_TEST(has(text, "holds 2 chunks"));
  BOOST_TEST(has(text, "\"interleaved_1f1b\""));
}

BOOST_AUTO_TEST_CASE(one_f_one_b_allows_fewer_microbatches_than_stages) {
  BOOST_TEST(refusal(ps::Schedule::one_f_one_b, {4, 0, 2, 1, std::nullopt, false}).empty());
}

BOOST_AUTO_TEST_CASE(group_size_outside_pp_m) {
  // M < P with the default N = P: Megatron's [PP=4, M=3].
  std::string text = refusal(ps::Schedule::interleaved, {4, 0, 3, 2, std::nullopt, false});
  BOOST_TEST(has(text, "scheduler \"interleaved_1f1b\""));
  BOOST_TEST(has(text, "should range in [PP=4, M=3]"));
  BOOST_TEST(has(text, "train.microbatches 3 < pp 4"));
  // N > M.
  text = refusal(ps::Schedule::interleaved, {2, 0, 4, 2, 5, false});
  BOOST_TEST(has(text, "[PP=2, M=4], but microbatch_group_size_per_vp_stage is 5"));
  // N < P.
  text = refusal(ps::Schedule::interleaved, {4, 0, 8, 2, 3, false});
  BOOST_TEST(has(text, "[PP=4, M=8], but microbatch_group_size_per_vp_stage is 3"));
}

BOOST_AUTO_TEST_CASE(last_group_smaller_than_pp) {
  // M 7, N 3, P 3: remainder 1 < 3.
  const std::string text = refusal(ps::Schedule::interleaved, {3, 2, 7, 2, 3, false});
  BOOST_TEST(has(text, "The remainder of M (the total micro-batches, 7) divided by N"));
  BOOST_TEST(has(text, "(PP=3), but it is 1"));
  BOOST_TEST(has(text, "dependency bubbles"));
  // M 8, N 3, P 2: remainder 2 >= 2 is fine; M 6, N 3: 0 is fine.
  BOOST_TEST(refusal(ps::Schedule::interleaved, {2, 0, 8, 2, 3, false}).empty());
  BOOST_TEST(refusal(ps::Schedule::interleaved, {3, 0, 6, 2, 3, false}).empty());
}

BOOST_AUTO_TEST_CASE(virtual_stages_without_pipeline) {
  const std::string text = refusal(ps::Schedule::interleaved, {1, 0, 4, 2, std::nullopt, false});
  BOOST_TEST(has(text, "pipeline-model-parallel size should be greater than 1 with interleaved schedule"));
}

BOOST_AUTO_TEST_CASE(overlap_with_pp_needs_virtual_stages) {
  for (const ps::Schedule s : {ps::Schedule::one_f_one_b, ps::Schedule::interleaved}) {
    const std::string text = refusal(s, {2, 0, 4, 1, std::nullopt, true});
    BOOST_TEST(has(text, "overlap_moe_expert_parallel_comm"));
    BOOST_TEST(has(text, "\"interleaved_1f1b\""));
    BOOST_TEST(has(text, "virtual_stages >= 2"));
  }
  // With virtual stages it runs.
  BOOST_TEST(refusal(ps::Schedule::interleaved, {2, 0, 4, 2, std::nullopt, true}).empty());
}

BOOST_AUTO_TEST_CASE(no_pipeline_at_all) {
  BOOST_TEST(
      has(refusal(ps::Schedule::one_f_one_b, {2, 2, 4, 1, std::nullopt, false}), "pipeline rank 2 of 2"));
  BOOST_TEST(
      has(refusal(ps::Schedule::interleaved, {0, 0, 4, 1, std::nullopt, false}), "pipeline rank 0 of 0"));
}

BOOST_AUTO_TEST_SUITE_END()

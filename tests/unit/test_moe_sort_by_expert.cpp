// The index arithmetic of moe.layer's GPU permutation (plugins/moe/src/cuda/sort_by_expert.hpp,
// run by one thread block in permutation.cu) run here on the host, phase by phase with the
// block's barriers as loop boundaries, against the CPU's Permutation::build: the same offsets,
// the same token per row and the same row per (token, choice), on random routings (skewed ones,
// experts without tokens, more experts than workers, fewer pairs than workers); and a capacity's
// choice (sort::keeps, one GPU thread per pair) against the CPU's apply_capacity, by probability
// (with ties) and by position, then the sort of the kept pairs. It checks the arithmetic the
// kernels run, not the kernels themselves (that needs a GPU: gpu.test_moe_cuda).
#define BOOST_TEST_MODULE moe_sort_by_expert
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "capacity.hpp"
#include "config.hpp"
#include "cuda/sort_by_expert.hpp"
#include "permutation.hpp"

namespace {

namespace sort = plexus::moe::sort;
using plexus::moe::Permutation;

struct Sorted {
  std::vector<int64_t> offsets, row_token, row_pair, slot_row;
};

// The kernel's phases in order; within a phase the workers are independent, so any order of them
// gives what the block computes.
Sorted sort_as_the_block_does(int64_t tokens, int64_t topk, int64_t experts, int64_t workers,
                              const std::vector<int32_t>& chosen, const uint8_t* kept = nullptr) {
  const sort::SortShape s{tokens * topk, topk, experts, workers};
  Sorted out;
  out.offsets.assign(static_cast<std::size_t>(experts + 1), -7);
  int64_t rows = 0;
  for (int64_t i = 0; i < tokens * topk; ++i) rows += kept == nullptr || kept[i] != 0 ? 1 : 0;
  out.row_token.assign(static_cast<std::size_t>(rows), -7);
  out.row_pair.assign(static_cast<std::size_t>(rows), -7);
  out.slot_row.assign(static_cast<std::size_t>(tokens * topk), -7);
  std::vector<int64_t> cursor(static_cast<std::size_t>(workers * experts), -7);
  for (int64_t w = workers - 1; w >= 0; --w) sort::count_chunk(s, w, chosen.data(), kept, cursor.data());
  for (int64_t e = 0; e < experts; ++e) sort::total_expert(s, e, cursor.data(), out.offsets.data());
  sort::prefix_offsets(s, out.offsets.data());
  for (int64_t e = experts - 1; e >= 0; --e) sort::start_rows(s, e, out.offsets.data(), cursor.data());
  for (int64_t w = workers - 1; w >= 0; --w)
    sort::place_chunk(s, w, chosen.data(), kept, cursor.data(), out.row_token.data(), out.row_pair.data(),
                      out.slot_row.data());
  return out;
}

// k different experts per token, drawn with a bias towards the low experts when `skewed`.
std::vector<int32_t> random_routing(int64_t tokens, int64_t topk, int64_t experts, bool skewed,
                                    std::mt19937_64& rng) {
  std::vector<int32_t> chosen;
  std::vector<int32_t> ids(static_cast<std::size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(ids.begin(), ids.end(), 0);
    if (!skewed || rng() % 4 == 0) std::shuffle(ids.begin(), ids.end(), rng);
    chosen.insert(chosen.end(), ids.begin(), ids.begin() + topk);
  }
  return chosen;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_blocks_counting_sort_gives_the_cpus_permutation) {
  std::mt19937_64 rng(11);
  struct Case {
    int64_t tokens, topk, experts;
  };
  const Case cases[] = {{0, 2, 4},   {1, 1, 1},     {1, 2, 8},     {7, 2, 3},    {100, 1, 8},
                        {100, 4, 8}, {1000, 2, 64}, {513, 3, 300}, {5000, 2, 16}};
  int checked = 0;
  for (const Case& c : cases)
    for (const int64_t workers : {int64_t{1}, int64_t{3}, int64_t{256}})
      for (const bool skewed : {false, true}) {
        const std::vector<int32_t> chosen = random_routing(c.tokens, c.topk, c.experts, skewed, rng);
        const Permutation cpu = Permutation::build(c.tokens, c.topk, c.experts, chosen.data(), nullptr);
        const Sorted gpu = sort_as_the_block_does(c.tokens, c.topk, c.experts, workers, chosen);
        BOOST_TEST_CONTEXT("T " << c.tokens << " k " << c.topk << " E " << c.experts << " workers " << workers
                                << (skewed ? " skewed" : "")) {
          BOOST_TEST(gpu.offsets == cpu.offsets, boost::test_tools::per_element());
          BOOST_TEST(gpu.row_token == cpu.row_token, boost::test_tools::per_element());
          BOOST_TEST(gpu.slot_row == cpu.slot_row, boost::test_tools::per_element());
        }
        ++checked;
      }
  BOOST_TEST(checked == 54);
}

// Every worker's chunk is contiguous and in order, and together they cover every pair once, for
// pair counts below, at and above the worker count.
BOOST_AUTO_TEST_CASE(the_chunks_cover_every_pair_once_in_order) {
  for (const int64_t pairs :
       {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{10000}}) {
    const sort::SortShape s{pairs, 1, 1, 256};
    int64_t next = 0;
    for (int64_t w = 0; w < s.workers; ++w) {
      BOOST_TEST(s.first(w) == next);
      BOOST_TEST(s.first(w + 1) >= s.first(w));
      next = s.first(w + 1);
    }
    BOOST_TEST(next == pairs);
  }
}

// A capacity by probability (the probabilities on a coarse grid, so that ties at the boundary
// occur) and by position: sort::keeps over the dropless sort gives apply_capacity's choice, and
// the sort of the kept pairs Permutation::build's rows.
BOOST_AUTO_TEST_CASE(a_capacitys_choice_and_the_kept_pairs_sort_as_on_the_cpu) {
  std::mt19937_64 rng(12);
  std::uniform_int_distribution<int> grid(1, 8);
  int dropping = 0;
  for (const bool by_position : {false, true})
    for (const double factor : {0.5, 1.0, 1.5})
      for (const int64_t tokens : {int64_t{1}, int64_t{9}, int64_t{200}}) {
        const int64_t topk = 2, experts = 4;
        plexus::moe::MoeConfig c;
        c.experts = experts;
        c.topk = topk;
        c.capacity_factor = factor;
        c.drop_by_position = by_position;
        const std::vector<int32_t> chosen = random_routing(tokens, topk, experts, true, rng);
        std::vector<float> probs(chosen.size());
        for (float& p : probs) p = static_cast<float>(grid(rng)) / 8.0f;
        std::vector<uint8_t> cpu_kept;
        const int64_t dropped =
            plexus::moe::apply_capacity<float>(c, tokens, chosen.data(), probs.data(), cpu_kept);
        dropping += dropped > 0 ? 1 : 0;
        const Sorted all = sort_as_the_block_does(tokens, topk, experts, 3, chosen);
        std::vector<uint8_t> kept(chosen.size());
        for (std::size_t i = 0; i < kept.size(); ++i)
          kept[i] = sort::keeps(static_cast<int64_t>(i), c.capacity(tokens), by_position, chosen.data(),
                                probs.data(), all.offsets.data(), all.row_pair.data(), all.slot_row.data());
        const Permutation cpu = Permutation::build(tokens, topk, experts, chosen.data(), cpu_kept.data());
        const Sorted gpu = sort_as_the_block_does(tokens, topk, experts, 3, chosen, kept.data());
        BOOST_TEST_CONTEXT("T " << tokens << " factor " << factor
                                << (by_position ? " by position" : " by probs")) {
          BOOST_TEST(kept == cpu_kept, boost::test_tools::per_element());
          BOOST_TEST(gpu.offsets == cpu.offsets, boost::test_tools::per_element());
          BOOST_TEST(gpu.row_token == cpu.row_token, boost::test_tools::per_element());
          BOOST_TEST(gpu.slot_row == cpu.slot_row, boost::test_tools::per_element());
        }
      }
  BOOST_TEST(dropping >= 8);  // the cases do drop pairs
}

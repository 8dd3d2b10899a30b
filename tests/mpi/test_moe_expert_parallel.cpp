// Expert parallelism through real MPI processes: an MoE GPT (every layer's MLP an MoE layer of 4
// experts, top-2, with shared experts) under `mpirun -np N` with an "ep" group of 2 or 4 ranks
// against one process (ep = 1) with N microbatches on the same tokens. The ep ranks are
// data-parallel ranks of the dense part, so the global batch, the data positions and the
// averaging are those of plain data parallelism; what differs is where each expert's rows are
// multiplied: an expert's grouped product takes the rows of every ep rank in one product where
// the single process runs one per microbatch, and its gradient sums over them in another order.
// So only the order of floating-point sums differs, and losses and final weights agree within
// 1e-6 relative (fp32 rounding of reordered sums is ~1e-7; Adam over 10 steps does not amplify
// it past that on this model, as for data parallelism in test_dp_training). A missing or wrong
// exchange, regrouping or gradient average would be a difference of the size of the update.
// Also: checkpoints hold every expert under its global name and resume at another ep size; the
// refusals. Reported skipped where there is no mpirun or no MPI comm backend.
#define BOOST_TEST_MODULE moe_expert_parallel
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "mpi_launch.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "tensor_difference.hpp"
#include "train_corpus.hpp"

using plexus::test::mpirun_command;
using plexus::test::quote;
using plexus::test::records;
using plexus::test::run_process;
using plexus::test::worst_difference;
using Corpus = plexus::test::TrainCorpus;

namespace {

constexpr double kRelative = 1e-6;
const std::string kMoe =
    " --set model.moe.layer_freq=1"
    " --set 'model.moe.options={\"num_moe_experts\": 4, \"moe_router_topk\": 2, \"moe_aux_loss_coeff\": 0.01,"
    " \"moe_shared_expert_intermediate_size\": 16}' --set distributed.timeout_s=60";

std::string ep(int size) { return " --set 'distributed.topology.options={\"ep\": " + std::to_string(size) + "}'"; }

// step -> loss of a run's metrics.jsonl.
std::map<int64_t, double> losses_by_step(const std::filesystem::path& run) {
  std::map<int64_t, double> out;
  for (const auto& r : records(run / "metrics.jsonl", "step")) out[r.at("step").as_int64()] = r.at("loss").as_double();
  return out;
}

// The losses of `other` at the steps it ran equal `reference`'s, and their last checkpoints'
// weights agree, all within kRelative.
void expect_same_run(const std::filesystem::path& reference, const std::filesystem::path& other,
                     std::size_t steps) {
  const auto a = losses_by_step(reference);
  const auto b = losses_by_step(other);
  BOOST_TEST_REQUIRE(b.size() == steps);
  for (const auto& [step, loss] : b) {
    BOOST_TEST_REQUIRE(a.count(step) == 1u);
    BOOST_TEST(std::abs(a.at(step) - loss) <= kRelative * std::abs(a.at(step)),
               "step " << step << ": " << a.at(step) << " vs " << loss);
  }
  const auto last = reference / "checkpoints" / "step_00000010";
  const auto ca = plexus::checkpoint::load_checkpoint(last);
  const auto cb = plexus::checkpoint::load_checkpoint(other / "checkpoints" / "step_00000010");
  const double weights = worst_difference(ca.model, cb.model);
  BOOST_TEST_MESSAGE("worst relative weight difference: " << weights);
  BOOST_TEST(weights <= kRelative);
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the MPI comm backend (libplexus_comm_mpi.so)")

BOOST_AUTO_TEST_CASE(ep_2_and_ep_4_match_one_process_with_as_many_microbatches) {
  Corpus corpus;
  for (const int n : {2, 4}) {
    const auto one = corpus.dir.path() / ("one" + std::to_string(n));
    const auto many = corpus.dir.path() / ("ep" + std::to_string(n));
    const std::string steps = " --set train.steps=10";
    const auto single =
        run_process(corpus.train(one.string(), "--set train.microbatches=" + std::to_string(n) + steps + kMoe));
    BOOST_TEST_REQUIRE(single.status == 0, single.output);
    const auto parallel = run_process(mpirun_command(n, 120) +
                                      corpus.train(many.string(), "--set train.microbatches=1" + steps + kMoe + ep(n)));
    BOOST_TEST_REQUIRE(parallel.status == 0, parallel.output);
    const auto l = losses_by_step(one);
    BOOST_TEST(l.at(10) < l.at(1));
    expect_same_run(one, many, 10);
    // One file with every expert of every layer under its global index, and its Adam moments.
    const auto saved = plexus::checkpoint::load_checkpoint(many / "checkpoints" / "step_00000010");
    for (int layer = 0; layer < 2; ++layer)
      for (int e = 0; e < 4; ++e) {
        const std::string name = "decoder.layers." + std::to_string(layer) + ".mlp.experts.local_experts." +
                                 std::to_string(e) + ".linear_fc1.weight";
        BOOST_TEST(saved.model.contains(name), name);
        BOOST_TEST(saved.optimizer.contains(name + ".exp_avg"), name);
      }
    const auto ref = plexus::checkpoint::load_checkpoint(one / "checkpoints" / "step_00000010");
    // The Adam moments carry the same reordered sums as the weights (measured 4.2e-7 for ep = 2
    // and 4), so they are held to the same bound.
    const double moments = worst_difference(ref.optimizer, saved.optimizer);
    BOOST_TEST_MESSAGE("ep = " << n << ": worst relative Adam moment difference " << moments);
    BOOST_TEST(moments <= kRelative);
  }
}

// The aux-loss-free expert bias through plexus-train: ep = 2 on 2 ranks against one process with
// 2 microbatches, both with the bias on, 10 steps. The bias is a whole number of update rates
// moved by integer counts summed over the ranks, so the checkpoints' biases are equal bit for bit
// (the weights, as above, within 1e-6); tests/mpi/test_moe_bias_ranks.cpp checks the ranks hold
// the same bias.
BOOST_AUTO_TEST_CASE(the_expert_bias_of_ep_2_is_the_one_process_bias) {
  Corpus corpus;
  const std::string options = " --set train.steps=10" + kMoe +
                              " --set model.moe.options.moe_router_enable_expert_bias=true"
                              " --set model.moe.options.moe_router_score_function=sigmoid"
                              " --set model.moe.options.moe_router_bias_update_rate=0.015625";
  const auto one = corpus.dir.path() / "one";
  const auto two = corpus.dir.path() / "two";
  const auto single = run_process(corpus.train(one.string(), "--set train.microbatches=2" + options));
  BOOST_TEST_REQUIRE(single.status == 0, single.output);
  const auto parallel =
      run_process(mpirun_command(2, 120) + corpus.train(two.string(), "--set train.microbatches=1" + options + ep(2)));
  BOOST_TEST_REQUIRE(parallel.status == 0, parallel.output);
  expect_same_run(one, two, 10);
  const auto a = plexus::checkpoint::load_checkpoint(one / "checkpoints" / "step_00000010");
  const auto b = plexus::checkpoint::load_checkpoint(two / "checkpoints" / "step_00000010");
  bool moved = false;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string name = "decoder.layers." + std::to_string(layer) + ".mlp.router.expert_bias";
    BOOST_TEST_REQUIRE(a.model.contains(name));
    const auto va = a.model.tensor(name);
    const auto vb = b.model.tensor(name);
    BOOST_TEST((va.bytes.size() == vb.bytes.size() && std::equal(va.bytes.begin(), va.bytes.end(), vb.bytes.begin())),
               name);
    for (std::size_t i = 0; i < va.bytes.size() / sizeof(float); ++i)
      moved = moved || reinterpret_cast<const float*>(va.bytes.data())[i] != 0.0f;
  }
  BOOST_TEST(moved);
}

// Four ranks, ep = 2 (so each expert lives on 2 ranks: expert_dp = 2), stopped at step 4; the
// checkpoint resumes with ep = 4 to step 7, that one with ep = 2 again to step 10, and the first
// one in one process (ep = 1, 4 microbatches) to step 10: each continues the uninterrupted run.
BOOST_AUTO_TEST_CASE(a_checkpoint_resumes_at_another_ep_size) {
  Corpus corpus;
  const auto d = corpus.dir.path();
  // `ranks` processes (mpirun when more than one) with ep = `ep_size`, to `steps`, into `out`,
  // resuming from the checkpoint `from` (relative to d) when one is given; the global batch is
  // 4 microbatches throughout.
  const auto train = [&](int ranks, int ep_size, int steps, const std::string& out, const std::string& from) {
    const std::string options = " --set train.microbatches=" + std::to_string(4 / ranks) + " --set train.steps=" +
                                std::to_string(steps) + kMoe + (ranks > 1 ? ep(ep_size) : "") +
                                (from.empty() ? "" : " --resume " + quote((d / from).string()));
    return run_process((ranks > 1 ? mpirun_command(ranks, 120) : "") + corpus.train((d / out).string(), options));
  };
  const auto whole = train(4, 2, 10, "whole", "");
  BOOST_TEST_REQUIRE(whole.status == 0, whole.output);
  const auto first = train(4, 2, 4, "first", "");
  BOOST_TEST_REQUIRE(first.status == 0, first.output);
  const auto wider = train(4, 4, 7, "wider", "first/checkpoints/step_00000004");
  BOOST_TEST_REQUIRE(wider.status == 0, wider.output);
  const auto back = train(4, 2, 10, "back", "wider/checkpoints/step_00000007");
  BOOST_TEST_REQUIRE(back.status == 0, back.output);
  expect_same_run(d / "whole", d / "back", 3);
  const auto single = train(1, 1, 10, "single", "first/checkpoints/step_00000004");
  BOOST_TEST_REQUIRE(single.status == 0, single.output);
  expect_same_run(d / "whole", d / "single", 6);
}

BOOST_AUTO_TEST_CASE(experts_that_do_not_divide_over_ep_and_another_expert_count_are_refused) {
  Corpus corpus;
  const auto d = corpus.dir.path();
  const auto odd = run_process(mpirun_command(2, 120) +
                               corpus.train((d / "odd").string(), "--set train.microbatches=1" + kMoe + ep(2) +
                                                                      " --set model.moe.options.num_moe_experts=3"));
  BOOST_TEST(odd.status != 0);
  BOOST_TEST(odd.output.find("num_moe_experts (3) must be divisible by the expert-parallel size (the \"ep\" group "
                             "has 2 ranks)") != std::string::npos,
             odd.output);
  BOOST_TEST(!std::filesystem::exists(d / "odd" / "checkpoints"));

  const auto run = run_process(mpirun_command(2, 120) +
                               corpus.train((d / "run").string(), "--set train.microbatches=1 --set train.steps=2" + kMoe + ep(2)));
  BOOST_TEST_REQUIRE(run.status == 0, run.output);
  const auto other = run_process(
      mpirun_command(2, 120) +
      corpus.train((d / "other").string(), "--set train.microbatches=1 --set train.steps=4" + kMoe + ep(2) +
                                               " --set model.moe.options.num_moe_experts=8 --resume " +
                                               quote((d / "run/checkpoints/step_00000002").string())));
  BOOST_TEST(other.status != 0);
  BOOST_TEST(other.output.find("\"num_moe_experts\":4") != std::string::npos, other.output);
  BOOST_TEST(other.output.find("\"num_moe_experts\":8") != std::string::npos, other.output);
}

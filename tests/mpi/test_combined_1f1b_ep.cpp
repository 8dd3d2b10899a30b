// The combined_1f1b scheduler with real expert parallelism: a GPT whose layer 0 MLP is an MoE
// layer (ep over every rank, its dispatch and combine all-to-alls as comm stages) and layer 1's
// dense, under `mpirun -np 2` and `-np 4`, with and without mHC, trained 10 steps of 2
// microbatches per rank with the sequential scheduler and with combined_1f1b. The two must give
// bit-identical losses and final weights: combined_1f1b only moves stages of one microbatch
// between the other's, and each parameter still accumulates microbatch 0's gradient before
// microbatch 1's. combined_1f1b delays the weight gradients of moe.layer, the attention and the
// dense MLP by default (backward_weights); with "delay_weight_gradients": false, and under the
// ZeRO-3 strategy (optim_grads_params, whose gradient buffers stay acquired until the delayed
// weight gradients are written), the results are the same bits. Also the refusals through plexus-train. Reported
// skipped where there is no mpirun or no MPI comm backend.
#define BOOST_TEST_MODULE combined_1f1b_ep
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "mpi_launch.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "tensor_difference.hpp"
#include "train_corpus.hpp"

using plexus::test::expect_identical_checkpoints;
using plexus::test::mpirun_command;
using plexus::test::run_process;
using plexus::test::step_losses;
using Corpus = plexus::test::TrainCorpus;

namespace {

const std::string kMoe =
    " --set model.moe.layer_freq=2"
    " --set 'model.moe.options={\"num_moe_experts\": 4, \"moe_router_topk\": 2, \"moe_aux_loss_coeff\": 0.01}'"
    " --set distributed.timeout_s=60 --set train.steps=10 --set train.microbatches=2";
// plugins.load names the schedulers and the mHC backend a run loads (layers load by themselves).
const std::string kPlugins = R"( --set 'plugins.load=["sequential_scheduler","transformer","combined_1f1b"]')";
const std::string kPluginsMhc =
    R"( --set 'plugins.load=["sequential_scheduler","transformer","combined_1f1b","mhc_native"]')"
    " --set mhc.enabled=true --set mhc.backend=mhc_native";

std::string ep(int size) { return " --set 'distributed.topology.options={\"ep\": " + std::to_string(size) + "}'"; }
std::string scheduler(const std::string& name) { return " --set scheduler.component=" + name; }


}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the MPI comm backend (libplexus_comm_mpi.so)")

BOOST_AUTO_TEST_CASE(combined_1f1b_matches_sequential_bit_for_bit_on_2_and_4_ranks_with_and_without_mhc) {
  Corpus corpus;
  for (const int n : {2, 4}) {
    for (const bool mhc : {false, true}) {
      BOOST_TEST_CONTEXT(n << " ranks, ep " << n << (mhc ? ", mHC" : "")) {
        const std::string tag = std::to_string(n) + (mhc ? "_mhc" : "");
        const auto seq_dir = corpus.dir.path() / ("sequential" + tag);
        const auto c1f1b_dir = corpus.dir.path() / ("combined" + tag);
        const std::string common = kMoe + ep(n) + (mhc ? kPluginsMhc : kPlugins);
        const auto sequential =
            run_process(mpirun_command(n, 120) + corpus.train(seq_dir.string(), common + scheduler("sequential")));
        BOOST_TEST_REQUIRE(sequential.status == 0, sequential.output);
        const auto combined =
            run_process(mpirun_command(n, 120) + corpus.train(c1f1b_dir.string(), common + scheduler("combined_1f1b")));
        BOOST_TEST_REQUIRE(combined.status == 0, combined.output);

        const std::vector<double> a = step_losses(seq_dir / "metrics.jsonl");
        const std::vector<double> b = step_losses(c1f1b_dir / "metrics.jsonl");
        BOOST_TEST_REQUIRE(a.size() == 10u);
        BOOST_TEST(a.back() < a.front());  // it trained
        BOOST_TEST(a == b, boost::test_tools::per_element());  // exactly: the JSON keeps every bit of a double
        expect_identical_checkpoints(seq_dir, c1f1b_dir);
      }
    }
  }
}

// Expert tensor parallelism beside ep: tp 2 (sequence parallelism) with the experts split over
// expert_tp 2, ep 2, dp 2 on 4 ranks; combined_1f1b runs the expert_tp gathers and reduce-scatters
// inside the experts' compute stages while another microbatch's all-to-all is in flight, and its
// delayed weight gradients read the gathered rows: the same bits as the sequential scheduler.
BOOST_AUTO_TEST_CASE(combined_1f1b_matches_sequential_with_expert_tensor_parallelism) {
  Corpus corpus;
  const std::string common = kMoe + kPlugins +
                             " --set model.num_attention_heads=4 --set model.sequence_parallel=true" +
                             " --set 'distributed.topology.options={\"tp\": 2, \"ep\": 2}'";
  const auto seq_dir = corpus.dir.path() / "sequential";
  const auto c1f1b_dir = corpus.dir.path() / "combined";
  const auto sequential =
      run_process(mpirun_command(4, 120) + corpus.train(seq_dir.string(), common + scheduler("sequential")));
  BOOST_TEST_REQUIRE(sequential.status == 0, sequential.output);
  const auto combined = run_process(mpirun_command(4, 120) +
                                    corpus.train(c1f1b_dir.string(), common + scheduler("combined_1f1b")));
  BOOST_TEST_REQUIRE(combined.status == 0, combined.output);
  const std::vector<double> a = step_losses(seq_dir / "metrics.jsonl");
  BOOST_TEST_REQUIRE(a.size() == 10u);
  BOOST_TEST(a == step_losses(c1f1b_dir / "metrics.jsonl"), boost::test_tools::per_element());
  expect_identical_checkpoints(seq_dir, c1f1b_dir);
}

// ep = 2 on 2 ranks under ZeRO-3: sequential, combined_1f1b with delayed weight gradients and
// combined_1f1b without, all the same bits.
BOOST_AUTO_TEST_CASE(delayed_weight_gradients_match_sequential_under_zero3_and_without_delay) {
  Corpus corpus;
  const std::string common = kMoe + ep(2) + kPlugins +
                             R"( --set 'distributed.data_parallel.options={"strategy": "optim_grads_params"}')";
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"sequential", scheduler("sequential")},
      {"delayed", scheduler("combined_1f1b")},
      {"not_delayed", scheduler("combined_1f1b") + R"( --set 'scheduler.options={"delay_weight_gradients": false}')"}};
  for (const auto& [name, extra] : runs) {
    const auto result = run_process(mpirun_command(2, 120) + corpus.train((corpus.dir.path() / name).string(), common + extra));
    BOOST_TEST_REQUIRE(result.status == 0, result.output);
  }
  const std::vector<double> reference = step_losses(corpus.dir.path() / "sequential" / "metrics.jsonl");
  BOOST_TEST_REQUIRE(reference.size() == 10u);
  BOOST_TEST(reference.back() < reference.front());  // it trained
  for (const char* name : {"delayed", "not_delayed"}) {
    BOOST_TEST_CONTEXT(name) {
      const std::vector<double> losses = step_losses(corpus.dir.path() / name / "metrics.jsonl");
      BOOST_TEST(losses == reference, boost::test_tools::per_element());
      expect_identical_checkpoints(corpus.dir.path() / "sequential", corpus.dir.path() / name);
    }
  }
}

BOOST_AUTO_TEST_CASE(one_microbatch_and_a_model_without_comm_stages_are_refused_before_training) {
  Corpus corpus;
  const auto d = corpus.dir.path();
  const auto one = run_process(mpirun_command(2, 120) +
                               corpus.train((d / "one").string(), kMoe + ep(2) + kPlugins + scheduler("combined_1f1b") +
                                                                      " --set train.microbatches=1"));
  BOOST_TEST(one.status != 0);
  BOOST_TEST(one.output.find("needs train.microbatches >= 2") != std::string::npos, one.output);
  BOOST_TEST(!std::filesystem::exists(d / "one" / "checkpoints"));

  const auto dense = run_process(corpus.train((d / "dense").string(), kPlugins + scheduler("combined_1f1b")));
  BOOST_TEST(dense.status != 0);
  BOOST_TEST(dense.output.find("no layer of this model has one") != std::string::npos, dense.output);
  BOOST_TEST(dense.output.find("use scheduler.component \"sequential\"") != std::string::npos, dense.output);
  BOOST_TEST(!std::filesystem::exists(d / "dense" / "checkpoints"));
}

// Data-parallel training through real MPI processes: `mpirun -np N plexus-train` against one
// process with N times the microbatches on the same tokens. The global batch, the data
// positions and the averaging are the same, so only the order of floating-point sums differs:
// losses and final weights agree within 1e-6 relative (fp32; measured differences are ~1e-7,
// the rounding of a handful of reordered sums, and Adam steps of 10 updates do not amplify them
// past that on this model). Also: one writer, gradients reduced during backward, configs that
// differ across ranks refused at start-up, and a topology the trainer cannot run refused.
#define BOOST_TEST_MODULE dp_training
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
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
using plexus::test::step_losses;
using Corpus = plexus::test::TrainCorpus;

namespace {

constexpr double kRelative = 1e-6;
const std::string kSteps = " --set train.steps=10 --set distributed.timeout_s=60";

// max |a - b| / max(max |a|, floor) over each tensor of the two checkpoints' models.
double worst_weight_difference(const std::filesystem::path& a, const std::filesystem::path& b,
                               double floor = 0) {
  return plexus::test::worst_difference(plexus::checkpoint::load_checkpoint(a).model,
                                        plexus::checkpoint::load_checkpoint(b).model, floor);
}

void expect_same_run(const std::filesystem::path& one, const std::filesystem::path& many,
                     double weight_floor = 0) {
  const std::vector<double> a = step_losses(one / "metrics.jsonl");
  const std::vector<double> b = step_losses(many / "metrics.jsonl");
  BOOST_TEST_REQUIRE(a.size() == 10u);
  BOOST_TEST_REQUIRE(b.size() == 10u);
  for (std::size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::abs(a[i] - b[i]) <= kRelative * std::abs(a[i]),
               "step " << i + 1 << ": " << a[i] << " vs " << b[i]);
  BOOST_TEST(a.back() < a.front());
  const double weights = worst_weight_difference(one / "checkpoints" / "step_00000010",
                                                 many / "checkpoints" / "step_00000010", weight_floor);
  BOOST_TEST_MESSAGE("worst relative weight difference: " << weights);
  BOOST_TEST(weights <= kRelative);
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the comm_mpi plugin (a build with MPI)")

BOOST_AUTO_TEST_CASE(two_ranks_match_one_rank_with_twice_the_microbatches) {
  Corpus corpus;
  const auto one = corpus.dir.path() / "one";
  const auto two = corpus.dir.path() / "two";
  const auto single = run_process(corpus.train(one.string(), "--set train.microbatches=2" + kSteps));
  BOOST_TEST_REQUIRE(single.status == 0, single.output);
  const auto dp =
      run_process(mpirun_command(2) + corpus.train(two.string(), "--set train.microbatches=1" + kSteps));
  BOOST_TEST_REQUIRE(dp.status == 0, dp.output);
  BOOST_TEST(dp.output.find("2 ranks from mpirun, comm backend 'mpi'") != std::string::npos, dp.output);
  expect_same_run(one, two);

  // One writer: a single start record, saying two ranks, with each rank's memory.
  const auto starts = records(two / "metrics.jsonl", "start");
  BOOST_TEST_REQUIRE(starts.size() == 1u);
  BOOST_TEST(starts[0].at("data_parallel_size").as_int64() == 2);
  BOOST_TEST(starts[0].at("memory_per_rank").as_array().size() == 2u);
  // The global batch doubles the tokens per step the single run's microbatches= 2 also had.
  BOOST_TEST(plexus::checkpoint::latest_checkpoint(two / "checkpoints").has_value());
}

// A Mamba/attention hybrid: 2 ranks against one process with 2 microbatches, as for the GPT.
BOOST_AUTO_TEST_CASE(a_hybrid_on_two_ranks_matches_one_rank) {
  Corpus corpus;
  const auto one = corpus.dir.path() / "one";
  const auto two = corpus.dir.path() / "two";
  const std::string hybrid =
      " --set 'model.pattern=M*M-' --set model.num_layers=4"
      " --set 'model.mamba.options={\"mamba_state_dim\": 8, \"mamba_head_dim\": 16, \"mamba_num_groups\": 2, "
      "\"chunk_size\": 12}'";
  const auto single = run_process(corpus.train(one.string(), "--set train.microbatches=2" + kSteps + hybrid));
  BOOST_TEST_REQUIRE(single.status == 0, single.output);
  const auto dp = run_process(mpirun_command(2) +
                              corpus.train(two.string(), "--set train.microbatches=1" + kSteps + hybrid));
  BOOST_TEST_REQUIRE(dp.status == 0, dp.output);
  expect_same_run(one, two);
  const auto weights = plexus::checkpoint::load_checkpoint(two / "checkpoints" / "step_00000010");
  BOOST_TEST(weights.model.contains("decoder.layers.2.mixer.A_log"));
}

// The hybrid with mHC around every sublayer. mHC's bias and alpha terms start at zero and some
// of their gradient elements are near-cancelling sums (one connection's bias moves 1e-8 in 10
// steps): reordering those sums changes such an element by a large fraction of itself, and
// Adam, which divides each element by its own magnitude, turns that into a 1e-3 relative
// difference of the tensor (measured with the defaults, while the losses agree to 4e-8). So
// this run takes Adam's division out (adam_eps = 1: momentum SGD, lr 0.2), which leaves only
// the reordered sums: every tensor agrees within 1e-6 of max(its largest value, 1e-3), the floor
// keeping a tensor that has barely left zero from being judged by its own rounding (measured:
// 2.6e-7 relative, or 3e-13 absolute for that bias). A missing or wrong reduction of any mHC
// gradient would be a difference of the order of the step itself.
BOOST_AUTO_TEST_CASE(a_hybrid_with_mhc_on_two_ranks_matches_one_rank) {
  Corpus corpus;
  const auto one = corpus.dir.path() / "one";
  const auto two = corpus.dir.path() / "two";
  const std::string hybrid_mhc =
      " --set 'model.pattern=M*M-' --set model.num_layers=4"
      " --set 'model.mamba.options={\"mamba_state_dim\": 8, \"mamba_head_dim\": 16, \"mamba_num_groups\": 2, "
      "\"chunk_size\": 12}'"
      " --set mhc.enabled=true --set mhc.backend=mhc_fused"
      " --set 'plugins.load=[\"sequential_scheduler\", \"transformer\", \"mhc_fused\"]'"
      " --set optimizer.adam_eps=1 --set optimizer.lr=0.2";
  const auto single =
      run_process(corpus.train(one.string(), "--set train.microbatches=2" + kSteps + hybrid_mhc));
  BOOST_TEST_REQUIRE(single.status == 0, single.output);
  const auto dp = run_process(mpirun_command(2) +
                              corpus.train(two.string(), "--set train.microbatches=1" + kSteps + hybrid_mhc));
  BOOST_TEST_REQUIRE(dp.status == 0, dp.output);
  expect_same_run(one, two, 1e-3);
  const auto weights = plexus::checkpoint::load_checkpoint(two / "checkpoints" / "step_00000010");
  BOOST_TEST(weights.model.contains("decoder.layers.2.mixer_hyper_connection.bias"));
}

BOOST_AUTO_TEST_CASE(four_ranks_match_one_rank_with_four_microbatches) {
  Corpus corpus;
  const auto one = corpus.dir.path() / "one";
  const auto four = corpus.dir.path() / "four";
  const auto single = run_process(corpus.train(one.string(), "--set train.microbatches=4" + kSteps));
  BOOST_TEST_REQUIRE(single.status == 0, single.output);
  const auto dp =
      run_process(mpirun_command(4) + corpus.train(four.string(), "--set train.microbatches=1" + kSteps));
  BOOST_TEST_REQUIRE(dp.status == 0, dp.output);
  expect_same_run(one, four);
}

BOOST_AUTO_TEST_CASE(a_two_rank_checkpoint_resumes_on_one_rank_with_the_same_global_batch) {
  Corpus corpus;
  const auto run = corpus.dir.path() / "run";
  const auto first = run_process(
      mpirun_command(2) + corpus.train(run.string(), "--set train.microbatches=1 --set train.steps=4"));
  BOOST_TEST_REQUIRE(first.status == 0, first.output);
  const auto ckpt = run / "checkpoints" / "step_00000004";
  const auto wrong = run_process(corpus.train(
      run.string(), "--set train.microbatches=1 --set train.steps=6 --resume " + quote(ckpt.string())));
  BOOST_TEST(wrong.status == 1);
  BOOST_TEST(
      wrong.output.find("microbatches per step over all data-parallel ranks: checkpoint 2, this run 1") !=
          std::string::npos,
      wrong.output);
  const auto right = run_process(corpus.train(
      run.string(), "--set train.microbatches=2 --set train.steps=6 --resume " + quote(ckpt.string())));
  BOOST_TEST(right.status == 0, right.output);
}

BOOST_AUTO_TEST_CASE(ranks_with_different_configs_are_refused_at_start_up) {
  Corpus corpus;
  const auto out = corpus.dir.path() / "run";
  // mpirun's MPMD form gives rank 1 a different command line.
  const std::string rank0 = corpus.train(out.string(), "--set train.steps=5");
  const std::string rank1 = corpus.train(out.string(), "--set train.steps=6");
  const std::string command = mpirun_command(1) + rank0 + " : -np 1 " + rank1;
  const auto result = run_process(command);
  BOOST_TEST(result.status != 0);
  BOOST_TEST(result.output.find("ranks started with different run configs") != std::string::npos,
             result.output);
  BOOST_TEST(result.output.find("rank 1") != std::string::npos, result.output);
  BOOST_TEST(result.output.find("config.train.steps: 5 vs 6") != std::string::npos, result.output);
  BOOST_TEST(!std::filesystem::exists(out / "metrics.jsonl"));  // refused before anything was written
}

BOOST_AUTO_TEST_CASE(a_world_that_does_not_factor_is_named) {
  Corpus corpus;
  const auto out = corpus.dir.path() / "run";
  const auto odd = run_process(
      mpirun_command(3) + corpus.train(out.string(), "--set 'distributed.topology.options={\"tp\": 2}'"));
  BOOST_TEST(odd.status != 0);
  BOOST_TEST(odd.output.find("world size 3") != std::string::npos, odd.output);
}

// The pipeline schedules on the real engine through plexus-train under mpirun: a GPT of 4 layers
// (untied embedding and head), 4 microbatches, 10 steps, trained with the sequential scheduler
// on one rank and with
//   - 1f1b at pp 2 and pp 4,
//   - interleaved_1f1b at pp 2 with 2 virtual stages, with and without the EP overlap;
// and a GPT with MoE layers under expert parallelism (ep 2) with the sequential scheduler at pp 1
// against interleaved_1f1b with the EP overlap at pp 2 (4 ranks). Every pair must give the same
// losses and the same checkpoint bytes: a schedule changes when a chunk runs, never what it
// computes, and each chunk's backward takes the microbatches in order, so every gradient
// accumulates microbatch 0, 1, ... as gradient accumulation does. The embedding and head are
// untied here: with them tied, pipelining sums the shared matrix's two gradient contributions
// over the embedding group after the step (Megatron's order), which rounds differently from one
// rank's interleaved accumulation. Every rank runs one OpenMP / OpenBLAS thread, so that runs with
// different rank counts do the same arithmetic. Also the refusals through plexus-train. Reported
// skipped where there is no mpirun or no MPI comm backend.
#define BOOST_TEST_MODULE pipeline_schedules_training
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
namespace fs = std::filesystem;

namespace {

const std::string kModel =
    " --set model.num_layers=4 --set model.untie_embeddings_and_output_weights=true"
    " --set train.microbatches=4 --set train.steps=10 --set distributed.timeout_s=60"
    R"( --set 'plugins.load=["sequential_scheduler","transformer","pipeline_schedules"]')";
const std::string kMoe =
    " --set model.moe.layer_freq=2"
    " --set 'model.moe.options={\"num_moe_experts\": 4, \"moe_router_topk\": 2, \"moe_aux_loss_coeff\": "
    "0.01}'";

// mpirun with one compute thread per rank.
std::string launch(int ranks) {
  return "env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 " + mpirun_command(ranks, 120);
}

std::string topology(const std::string& json) {
  return " --set 'distributed.topology.options=" + json + "'";
}


struct Run {
  std::string name;
  int ranks;
  std::string extra;
};

// Trains `reference` and every one of `runs`; each must match the reference exactly.
void expect_same_training(const Corpus& corpus, const std::string& common, const Run& reference,
                          const std::vector<Run>& runs) {
  const auto trained =
      run_process(launch(reference.ranks) +
                  corpus.train((corpus.dir.path() / reference.name).string(), common + reference.extra));
  BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
  const std::vector<double> expected = step_losses(corpus.dir.path() / reference.name / "metrics.jsonl");
  BOOST_TEST_REQUIRE(expected.size() == 10u);
  BOOST_TEST(expected.back() < expected.front());  // it trained
  for (const Run& r : runs) {
    BOOST_TEST_CONTEXT(r.name) {
      const fs::path dir = corpus.dir.path() / r.name;
      const auto result = run_process(launch(r.ranks) + corpus.train(dir.string(), common + r.extra));
      BOOST_TEST_REQUIRE(result.status == 0, result.output);
      BOOST_TEST(step_losses(dir / "metrics.jsonl") == expected, boost::test_tools::per_element());
      expect_identical_checkpoints(corpus.dir.path() / reference.name, dir);
    }
  }
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the MPI comm backend (libplexus_comm_mpi.so)")

BOOST_AUTO_TEST_CASE(pipelined_gpt_matches_gradient_accumulation_bit_for_bit) {
  Corpus corpus;
  const std::string interleaved =
      " --set scheduler.component=interleaved_1f1b --set distributed.pipeline.virtual_stages=2";
  expect_same_training(corpus, kModel, {"sequential", 1, " --set scheduler.component=sequential"},
                       {{"1f1b_pp2", 2, " --set scheduler.component=1f1b" + topology(R"({"pp": 2})")},
                        {"1f1b_pp4", 4, " --set scheduler.component=1f1b" + topology(R"({"pp": 4})")},
                        {"interleaved_pp2", 2, interleaved + topology(R"({"pp": 2})")},
                        {"interleaved_pp2_overlap", 2,
                         interleaved + topology(R"({"pp": 2})") +
                             " --set scheduler.options.overlap_moe_expert_parallel_comm=true"}});
}

BOOST_AUTO_TEST_CASE(ep_overlap_with_pipelining_matches_gradient_accumulation_bit_for_bit) {
  Corpus corpus;
  expect_same_training(
      corpus, kModel + kMoe,
      {"sequential_ep2", 2, " --set scheduler.component=sequential" + topology(R"({"ep": 2})")},
      {{"interleaved_overlap_pp2_ep2", 4,
        " --set scheduler.component=interleaved_1f1b --set distributed.pipeline.virtual_stages=2"
        " --set scheduler.options.overlap_moe_expert_parallel_comm=true" +
            topology(R"({"pp": 2, "ep": 2})")}});
}

BOOST_AUTO_TEST_CASE(refusals_stop_the_run_before_its_first_step) {
  Corpus corpus;
  const fs::path d = corpus.dir.path();
  const auto chunks = run_process(
      launch(2) + corpus.train((d / "chunks").string(), kModel + " --set scheduler.component=1f1b" +
                                                            topology(R"({"pp": 2})") +
                                                            " --set distributed.pipeline.virtual_stages=2"));
  BOOST_TEST(chunks.status != 0);
  BOOST_TEST(chunks.output.find("use scheduler.component \"interleaved_1f1b\"") != std::string::npos,
             chunks.output);
  const auto few = run_process(
      launch(2) + corpus.train((d / "few").string(), kModel + " --set scheduler.component=interleaved_1f1b" +
                                                         topology(R"({"pp": 2})") +
                                                         " --set distributed.pipeline.virtual_stages=2"
                                                         " --set train.microbatches=1"));
  BOOST_TEST(few.status != 0);
  BOOST_TEST(few.output.find("should range in [PP=2, M=1]") != std::string::npos, few.output);
  // Refused at the first step, before it trained: no step was recorded.
  for (const char* run : {"chunks", "few"}) {
    const fs::path metrics = d / run / "metrics.jsonl";
    BOOST_TEST((!fs::exists(metrics) || step_losses(metrics).empty()), run);
  }
}

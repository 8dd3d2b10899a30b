// Tensor parallelism through real MPI processes: `mpirun -np N plexus-train` with
// distributed.topology.options.tp against one process holding every layer whole, on the same
// global batch.
//
// What is equal and why not to the bit: a tp rank computes its heads, its MLP columns and its
// vocabulary rows exactly as the whole layer computes them, but the row-parallel products and the
// norm's input gradient are sums of tp partial products added in another order, the vocabulary's
// softmax sums its exponentials per rank before adding the ranks', and the gradient norm adds the
// shards' squares per rank. Each is float32 rounding (~1e-7 relative per step), which Adam then
// carries; 20 steps stay within 1e-6 relative for losses, every weight and every moment (a
// tensor's worst element difference over its largest element, at least 1e-3, so a tensor near
// zero does not turn rounding into a ratio).
// Initialization is the same to the bit: a shard is the slice of the whole tensor drawn by name.
//
// Reported skipped without mpirun or comm_mpi.
#define BOOST_TEST_MODULE tensor_parallel_training
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "mpi_launch.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"
#include "run_comparison.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "tensor_difference.hpp"
#include "train_corpus.hpp"

using plexus::test::mpirun_command;
using plexus::test::quote;
using plexus::test::records;
using plexus::test::run_process;
using plexus::test::step_losses;
using plexus::test::worst_difference;
using Corpus = plexus::test::TrainCorpus;
namespace fs = std::filesystem;

namespace {

// Four heads, an MLP of 128 (gelu) or 64 (swiglu) and the byte vocabulary of 256: every split
// of tp = 2 and 4 is even. Clipping on, so the norm's sum over tp matters.
const std::string kModel =
    " --set model.num_attention_heads=4 --set optimizer.clip_grad=0.5 --set distributed.timeout_s=60"
    " --set checkpoint.interval=10";
const std::string kSwigluGqaUntied =
    " --set model.activation=swiglu --set model.num_query_groups=2"
    " --set model.untie_embeddings_and_output_weights=true";
constexpr double kTolerance = 1e-6;
// Megatron's sequence parallelism: between the tensor-parallel regions each rank holds its block
// of the tokens.
const std::string kSequenceParallel = " --set model.sequence_parallel=true";
constexpr int kSteps = 20;

std::string tensor_parallel(int tp, const std::string& more = "") {
  return " --set 'distributed.topology.options={\"tp\": " + std::to_string(tp) + more + "}'";
}

using Difference = plexus::test::RunDifference;
using plexus::test::step_dir;

void train(const Corpus& corpus, const fs::path& out, int ranks, const std::string& extra) {
  plexus::test::train_ranks(corpus, out, ranks, extra);
}

std::string refused(const Corpus& corpus, const fs::path& out, int ranks, const std::string& extra) {
  return plexus::test::refused_run(corpus, out, ranks, extra);
}

// Within 1e-6 per tensor (over its largest element, at least 1e-3: a tensor near zero does not
// turn rounding into a ratio).
Difference compare_runs(const fs::path& a, const fs::path& b, int step) {
  return plexus::test::compare_runs(a, b, step, 1e-3);
}

void expect_close(const fs::path& a, const fs::path& b, int step) {
  const Difference d = compare_runs(a, b, step);
  BOOST_TEST(d.losses <= kTolerance, b.filename() << ": losses " << d.losses);
  BOOST_TEST(d.weights <= kTolerance, b.filename() << ": weights " << d.weights);
  BOOST_TEST(d.moments <= kTolerance, b.filename() << ": moments " << d.moments);
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the comm_mpi plugin (a build with MPI)")

// Learned absolute positions (Megatron's GPT default): the embedding table whole on every tp
// rank, added once into the vocabulary-parallel sum, its gradient the whole output gradient's on
// every rank; at tp = 2 with and without sequence parallelism, within 1e-6 of tp = 1.
BOOST_AUTO_TEST_CASE(learned_absolute_positions_under_tp) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string learned = kModel + R"( --set model.position_embedding_type=\"learned_absolute\")";
  train(corpus, root / "tp1", 1, learned);
  train(corpus, root / "tp2", 2, learned + tensor_parallel(2));
  train(corpus, root / "tp2_sp", 2, learned + tensor_parallel(2) + kSequenceParallel);
  for (const char* run : {"tp2", "tp2_sp"}) expect_close(root / "tp1", root / run, kSteps);
}

// The GPT (GeLU, tied embeddings) at tp = 2 and 4, and with SwiGLU, two query groups and untied
// embeddings at tp = 2, each with and without sequence parallelism: losses, weights and Adam
// moments within 1e-6 of tp = 1 after 20 steps.
// The checkpoints hold the same tensors under the same names and shapes whatever tp was: whole
// tensors, gathered over tp. The loss falls, so the comparison is of a model that learns.
BOOST_AUTO_TEST_CASE(gpt_tp_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  train(corpus, root / "tp1", 1, kModel);
  train(corpus, root / "tp2", 2, kModel + tensor_parallel(2));
  train(corpus, root / "tp4", 4, kModel + tensor_parallel(4));
  train(corpus, root / "tp2_sp", 2, kModel + tensor_parallel(2) + kSequenceParallel);
  train(corpus, root / "tp4_sp", 4, kModel + tensor_parallel(4) + kSequenceParallel);
  for (const char* run : {"tp2", "tp4", "tp2_sp", "tp4_sp"}) expect_close(root / "tp1", root / run, kSteps);

  train(corpus, root / "swiglu_tp1", 1, kModel + kSwigluGqaUntied);
  train(corpus, root / "swiglu_tp2", 2, kModel + kSwigluGqaUntied + tensor_parallel(2));
  train(corpus, root / "swiglu_tp2_sp", 2,
        kModel + kSwigluGqaUntied + tensor_parallel(2) + kSequenceParallel);
  expect_close(root / "swiglu_tp1", root / "swiglu_tp2", kSteps);
  expect_close(root / "swiglu_tp1", root / "swiglu_tp2_sp", kSteps);

  const auto losses = step_losses(root / "tp4" / "metrics.jsonl");
  BOOST_TEST(losses.back() < losses.front());
  // Initialization does not depend on tp: the first step's loss is the same to the bit.
  // The first loss comes from the same initial weights (each rank's shard a slice of the tp = 1
  // tensor): it differs only by the float32 sums' order over the split, well under 1e-6
  // relative, where weights drawn apart would differ by percents.
  BOOST_TEST(step_losses(root / "tp2" / "metrics.jsonl").front() ==
                 step_losses(root / "tp1" / "metrics.jsonl").front(),
             boost::test_tools::tolerance(1e-6));
}

// mHC's connection is whole on every tp rank (its streams are too): tp = 2 matches tp = 1 in
// losses and Adam moments within 1e-6. The weights within 1e-3: at initialization the gradients of
// mHC's alpha_res and bias are ~1e-9, sums whose terms cancel to ~1e-4 of their size, so the
// terms' float32 rounding is ~1e-3 of the gradient, and Adam's update (m / (sqrt(v) + eps))
// passes that relative error on whatever the gradient's size (measured 2.8e-4 after 20 steps; the
// moments themselves, absolute, stay within 2.4e-7 of each tensor's largest).
BOOST_AUTO_TEST_CASE(mhc_tp_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string mhc = kModel +
                          R"( --set 'plugins.load=["sequential_scheduler","transformer","mhc_native"]')"
                          " --set mhc.enabled=true --set mhc.backend=mhc_native";
  train(corpus, root / "tp1", 1, mhc);
  train(corpus, root / "tp2", 2, mhc + tensor_parallel(2));
  // Under sequence parallelism the streams are each rank's tokens, and mHC's gradients parts summed
  // over tp.
  train(corpus, root / "tp2_sp", 2, mhc + tensor_parallel(2) + kSequenceParallel);
  for (const char* run : {"tp2", "tp2_sp"}) {
    const Difference d = compare_runs(root / "tp1", root / run, kSteps);
    BOOST_TEST(d.losses <= kTolerance);
    BOOST_TEST(d.moments <= kTolerance);
    BOOST_TEST(d.weights <= 1e-3);
  }
}

// A hybrid of Mamba-2, attention and MLP layers (configs/hybrid.json's pattern, with two groups so
// that each of 2 ranks holds one): the mixer's in_proj is five parts [z, x, B, C, dt] and its
// convolution three [x, B, C], each rank holding its heads' share of every part; its checkpoint
// holds Megatron's whole [z; x; B; C; dt] whatever tp was. With sequence parallelism, and with a
// multi-token-prediction depth (its entry and layers on each rank's tokens).
BOOST_AUTO_TEST_CASE(hybrid_mamba_tp_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string hybrid =
      kModel + R"( --set 'plugins.load=["sequential_scheduler","transformer","hybrid_stack","mamba"]')"
               " --set 'model.pattern=M*M-' --set model.num_layers=4"
               R"( --set 'model.mamba.options={"mamba_state_dim": 16, "mamba_head_dim": 16, )"
               R"("mamba_num_groups": 2, "chunk_size": 16}')";
  train(corpus, root / "tp1", 1, hybrid);
  train(corpus, root / "tp2", 2, hybrid + tensor_parallel(2));
  train(corpus, root / "tp2_sp", 2, hybrid + tensor_parallel(2) + kSequenceParallel);
  expect_close(root / "tp1", root / "tp2", kSteps);
  expect_close(root / "tp1", root / "tp2_sp", kSteps);
  const std::string mtp = hybrid + " --set 'model.pattern=M*M-/*-' --set model.mtp_num_layers=1";
  train(corpus, root / "mtp_tp1", 1, mtp);
  train(corpus, root / "mtp_tp2_sp", 2, mtp + tensor_parallel(2) + kSequenceParallel);
  expect_close(root / "mtp_tp1", root / "mtp_tp2_sp", kSteps);
  // The first loss comes from the same initial weights (each rank's shard a slice of the tp = 1
  // tensor): it differs only by the float32 sums' order over the split, well under 1e-6
  // relative, where weights drawn apart would differ by percents.
  BOOST_TEST(step_losses(root / "tp2" / "metrics.jsonl").front() ==
                 step_losses(root / "tp1" / "metrics.jsonl").front(),
             boost::test_tools::tolerance(1e-6));
}

// MoE layers (4 experts, top 2, the load-balancing and z losses, a shared expert) at tp = 2 with
// sequence parallelism: each rank routes its block of the tokens with every expert whole, the aux
// loss's counts summed over tp, and the router's, experts' and norm's gradients summed over tp;
// and with the experts divided over ep beside tp. The reported losses and tokens per expert are
// the whole microbatch's.
BOOST_AUTO_TEST_CASE(moe_tp_with_sequence_parallelism_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string moe =
      kModel + " --set model.moe.layer_freq=2" +
      R"( --set 'model.moe.options={"num_moe_experts": 4, "moe_router_topk": 2, "moe_aux_loss_coeff": 0.01, )"
      R"("moe_z_loss_coeff": 0.001, "moe_shared_expert_intermediate_size": 32}')";
  train(corpus, root / "tp1", 1, moe);
  train(corpus, root / "tp2_sp", 2, moe + tensor_parallel(2, ", \"expert_tp\": 1") + kSequenceParallel);
  // Experts divided over ep = 2 beside tp = 2: the tp ranks exchange their blocks' tokens; and
  // with dp = 2 (4 ranks, a microbatch each), the experts' gradients summed over expert_dp.
  train(corpus, root / "tp2_ep2_sp", 2,
        moe + tensor_parallel(2, ", \"expert_tp\": 1, \"ep\": 2") + kSequenceParallel);
  train(corpus, root / "tp2_ep2_dp2_sp", 4,
        moe + " --set train.microbatches=1" + tensor_parallel(2, ", \"expert_tp\": 1, \"ep\": 2") +
            kSequenceParallel);
  // ep 2 < tp 4 at dp 1: two ranks hold each expert (expert_dp 2), each its tp ranks' tokens; with
  // no data-parallel strategy the update sums their gradients over expert_dp itself.
  train(corpus, root / "tp4_ep2_sp", 4,
        moe + tensor_parallel(4, ", \"expert_tp\": 1, \"ep\": 2") + kSequenceParallel);
  for (const char* run : {"tp2_sp", "tp2_ep2_sp", "tp2_ep2_dp2_sp", "tp4_ep2_sp"})
    expect_close(root / "tp1", root / run, kSteps);
  const auto whole = records(root / "tp1" / "metrics.jsonl", "step").back();
  const auto split = records(root / "tp2_sp" / "metrics.jsonl", "step").back();
  for (const char* metric : {"moe/layer0.aux_loss", "moe/layer0.z_loss"})
    BOOST_TEST(split.at(metric).to_number<double>() == whole.at(metric).to_number<double>(),
               boost::test_tools::tolerance(1e-6));
  for (int e = 0; e < 4; ++e) {
    const std::string tokens = "moe/layer0.tokens_per_expert." + std::to_string(e);
    BOOST_TEST(split.at(tokens).to_number<double>() == whole.at(tokens).to_number<double>());
  }
}

// Expert tensor parallelism (expert_tp, by default tp): every expert's fc1 split on its rows
// (SwiGLU's [gate_r; up_r]) and fc2 on its columns; each rank's routed rows gathered over
// expert_tp, the partial outputs reduce-scattered back. GeLU and SwiGLU at tp 2, tp 4, and ep 2
// beside it (dp 2: the all-to-all over ep, then the gather over expert_tp), each within 1e-6 of
// one process (its checkpoint's whole expert tensors included); and the tp 2 checkpoint of step 10
// resumed at tp 1 (SwiGLU's parts re-cut) ends within 1e-6 of the uninterrupted run.
BOOST_AUTO_TEST_CASE(moe_expert_tensor_parallel_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string moe =
      kModel + " --set model.moe.layer_freq=2" +
      R"( --set 'model.moe.options={"num_moe_experts": 4, "moe_router_topk": 2, "moe_aux_loss_coeff": 0.01, )"
      R"("moe_shared_expert_intermediate_size": 32}')";
  const std::string swiglu = moe + " --set model.activation=swiglu";
  train(corpus, root / "tp1", 1, moe);
  train(corpus, root / "tp1_swiglu", 1, swiglu);
  train(corpus, root / "etp2", 2, moe + tensor_parallel(2) + kSequenceParallel);
  train(corpus, root / "etp2_swiglu", 2, swiglu + tensor_parallel(2) + kSequenceParallel);
  train(corpus, root / "etp4", 4, moe + tensor_parallel(4) + kSequenceParallel);
  train(corpus, root / "etp2_ep2_dp2", 4,
        moe + " --set train.microbatches=1" + tensor_parallel(2, ", \"ep\": 2") + kSequenceParallel);
  // An expert grid of its own: expert_tp 2 under tp 4 (two copies of every expert shard, each
  // with two tp ranks' tokens: summed over expert_dp), and expert_tp 2 across two data-parallel
  // ranks at tp 1 (each shard runs both ranks' microbatches).
  train(corpus, root / "tp4_etp2", 4, moe + tensor_parallel(4, ", \"expert_tp\": 2") + kSequenceParallel);
  train(corpus, root / "dp2_etp2", 2,
        moe + " --set train.microbatches=1" + tensor_parallel(1, ", \"expert_tp\": 2"));
  for (const char* run : {"etp2", "etp4", "etp2_ep2_dp2", "tp4_etp2", "dp2_etp2"})
    expect_close(root / "tp1", root / run, kSteps);
  expect_close(root / "tp1_swiglu", root / "etp2_swiglu", kSteps);
  train(corpus, root / "resumed", 1,
        swiglu + " --resume " + quote((root / "etp2_swiglu" / "checkpoints" / step_dir(10)).string()));
  const auto whole =
      plexus::checkpoint::load_checkpoint(root / "tp1_swiglu" / "checkpoints" / step_dir(kSteps));
  const auto resumed =
      plexus::checkpoint::load_checkpoint(root / "resumed" / "checkpoints" / step_dir(kSteps));
  BOOST_TEST(whole.model.names() == resumed.model.names());
  BOOST_TEST(worst_difference(whole.model, resumed.model, 1e-3) <= kTolerance);
  BOOST_TEST(worst_difference(whole.optimizer, resumed.optimizer, 1e-3) <= kTolerance);
}

// The aux-loss-free expert bias (sigmoid scores, as Megatron requires) at tp 2 with sequence
// parallelism: the step's tokens per expert are summed over tp, so every step reports the one
// process's counts and the bias (a function of them) moves alike; the losses within 1e-6. The
// weights are compared by the test above: with sigmoid scores a few weights whose gradient stays
// near zero take Adam steps of either sign from rounding alone (measured 1e-6 to 4e-6 of their
// tensor's largest element, in a dense layer).
BOOST_AUTO_TEST_CASE(moe_expert_bias_over_tp_counts_every_rank_tokens) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string moe =
      kModel + " --set model.moe.layer_freq=2" +
      R"( --set 'model.moe.options={"num_moe_experts": 4, "moe_router_topk": 2, "moe_router_score_function": "sigmoid", )"
      R"("moe_router_enable_expert_bias": true}')";
  train(corpus, root / "tp1", 1, moe);
  train(corpus, root / "tp2_sp", 2, moe + tensor_parallel(2, ", \"expert_tp\": 1") + kSequenceParallel);
  BOOST_TEST(compare_runs(root / "tp1", root / "tp2_sp", kSteps).losses <= kTolerance);
  const auto whole = records(root / "tp1" / "metrics.jsonl", "step");
  const auto split = records(root / "tp2_sp" / "metrics.jsonl", "step");
  BOOST_TEST_REQUIRE(whole.size() == split.size());
  double moved = 0;
  for (std::size_t i = 0; i < whole.size(); ++i)
    for (int e = 0; e < 4; ++e) {
      const std::string tokens = "moe/layer0.tokens_per_expert." + std::to_string(e);
      BOOST_TEST(split[i].at(tokens).to_number<double>() == whole[i].at(tokens).to_number<double>());
      moved += std::abs(whole[i].at(tokens).to_number<double>() - whole[0].at(tokens).to_number<double>());
    }
  BOOST_TEST(moved > 0.0, "the counts change as the bias moves");
}

// tp = 2 composed with dp = 2 under ZeRO-3 (4 ranks, each data-parallel rank taking half the
// microbatches), against one process with every microbatch; with sequence parallelism the norms'
// partial gradients are summed over tp on each rank's ZeRO shard.
BOOST_AUTO_TEST_CASE(tp_composes_with_zero3) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  train(corpus, root / "whole", 1, kModel + " --set train.microbatches=2");
  train(corpus, root / "tp2_dp2", 4,
        kModel +
            " --set train.microbatches=1"
            R"( --set 'distributed.data_parallel.options={"strategy": "optim_grads_params"}')" +
            tensor_parallel(2));
  train(corpus, root / "tp2_dp2_sp", 4,
        kModel +
            " --set train.microbatches=1"
            R"( --set 'distributed.data_parallel.options={"strategy": "optim_grads_params"}')" +
            tensor_parallel(2) + kSequenceParallel);
  expect_close(root / "whole", root / "tp2_dp2", kSteps);
  expect_close(root / "whole", root / "tp2_dp2_sp", kSteps);
}

// Checkpoints reshard: 10 steps at tp = 2 with sequence parallelism, resumed at tp = 4 for 5, at
// tp = 2 x dp = 2 under ZeRO-3 for 3 and at tp = 1 for the last 2, ends within 1e-6 of the
// uninterrupted tp = 1 run.
BOOST_AUTO_TEST_CASE(resume_across_tp_sizes) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string model = kModel + " --set checkpoint.interval=5";
  train(corpus, root / "whole", 1, model);
  train(corpus, root / "a", 2, model + tensor_parallel(2) + kSequenceParallel + " --set train.steps=10");
  train(corpus, root / "b", 4,
        model + tensor_parallel(4) + " --set train.steps=15 --resume " +
            quote((root / "a" / "checkpoints" / step_dir(10)).string()));
  // tp = 2 x dp = 2 under ZeRO-3, the same global batch (each data-parallel rank half of it).
  train(corpus, root / "c", 4,
        model + tensor_parallel(2) + " --set train.microbatches=1 --set train.steps=18" +
            R"( --set 'distributed.data_parallel.options={"strategy": "optim_grads_params"}' --resume )" +
            quote((root / "b" / "checkpoints" / step_dir(15)).string()));
  train(corpus, root / "d", 1,
        model + " --set train.steps=20 --resume " +
            quote((root / "c" / "checkpoints" / step_dir(18)).string()));
  const auto whole = plexus::checkpoint::load_checkpoint(root / "whole" / "checkpoints" / step_dir(kSteps));
  const auto resumed = plexus::checkpoint::load_checkpoint(root / "d" / "checkpoints" / step_dir(kSteps));
  BOOST_TEST(whole.model.names() == resumed.model.names());
  BOOST_TEST(worst_difference(whole.model, resumed.model, 1e-3) <= kTolerance);
  BOOST_TEST(worst_difference(whole.optimizer, resumed.optimizer, 1e-3) <= kTolerance);
}

// Megatron's vocabulary padding depends on tp: with make_vocab_size_divisible_by 96 the byte
// vocabulary (256) is padded to 384 rows at tp = 2 and to 288 at tp = 1. A checkpoint of either
// resumes at the other, saying so: the rows both paddings hold are loaded, new rows are zero (the
// embedding and output layer are PLX_PARAM_VOCABULARY), as Megatron's allow_shape_mismatch does.
BOOST_AUTO_TEST_CASE(a_checkpoint_resumes_at_another_vocabulary_padding) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string model = kModel + " --set model.make_vocab_size_divisible_by=96";
  train(corpus, root / "tp2", 2, model + tensor_parallel(2) + " --set train.steps=10");
  const auto tp2 = plexus::checkpoint::load_checkpoint(root / "tp2" / "checkpoints" / step_dir(10));
  BOOST_TEST(tp2.model.info("embedding.word_embeddings.weight").shape.at(0) == 384);
  const std::string resume = plexus::test::kOneThread +
                             corpus.train((root / "tp1").string(),
                                          model + " --set train.steps=12 --resume " +
                                              quote((root / "tp2" / "checkpoints" / step_dir(10)).string()));
  const auto resumed = run_process(resume);
  BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
  BOOST_TEST(
      resumed.output.find("embedding.word_embeddings.weight has 384 rows and this run pads the vocabulary "
                          "to 288") != std::string::npos,
      resumed.output);
  const auto tp1 = plexus::checkpoint::load_checkpoint(root / "tp1" / "checkpoints" / step_dir(12));
  BOOST_TEST(tp1.model.info("embedding.word_embeddings.weight").shape.at(0) == 288);
  BOOST_TEST(tp1.optimizer.info("embedding.word_embeddings.weight.exp_avg").shape.at(0) == 288);
  // And back: 288 rows resumed at tp = 2 (384).
  train(corpus, root / "back", 2,
        model + tensor_parallel(2) + " --set train.steps=14 --resume " +
            quote((root / "tp1" / "checkpoints" / step_dir(12)).string()));
  const auto back = plexus::checkpoint::load_checkpoint(root / "back" / "checkpoints" / step_dir(14));
  BOOST_TEST(back.model.info("embedding.word_embeddings.weight").shape.at(0) == 384);
}

// What cannot be split is refused by name: query groups and Mamba groups that tp does not divide,
// MoE layers without sequence parallelism, or with an expert width expert_tp does not divide.
BOOST_AUTO_TEST_CASE(refusals_name_what_does_not_split) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string groups =
      refused(corpus, root / "groups", 4, kModel + kSwigluGqaUntied + tensor_parallel(4));
  BOOST_TEST(groups.find("model.num_query_groups (2) is not divisible by the 4 ranks of the tp group") !=
                 std::string::npos,
             groups);
  const std::string mamba =
      refused(corpus, root / "mamba", 2,
              kModel +
                  R"( --set 'plugins.load=["sequential_scheduler","transformer","hybrid_stack","mamba"]')"
                  " --set 'model.pattern=M*'"
                  R"( --set 'model.mamba.options={"mamba_head_dim": 16, "mamba_num_groups": 1}')" +
                  tensor_parallel(2));
  BOOST_TEST(mamba.find("mamba.mixer option mamba_num_groups (1) is not divisible by the 2 ranks of the tp "
                        "group") != std::string::npos,
             mamba);
  // MoE at tp > 1 needs sequence parallelism (Megatron's rule), expert_tp 1 and ep 1.
  const std::string moe_options =
      kModel + " --set model.moe.layer_freq=2" + R"( --set 'model.moe.options={"num_moe_experts": 4}')";
  const std::string moe =
      refused(corpus, root / "moe", 2, moe_options + tensor_parallel(2, ", \"expert_tp\": 1"));
  BOOST_TEST(moe.find("MoE layers under tensor parallelism need sequence parallelism") != std::string::npos,
             moe);
  // Expert tensor parallelism needs an expert width expert_tp divides.
  const std::string width =
      refused(corpus, root / "width", 2,
              kModel + " --set model.moe.layer_freq=2" +
                  R"( --set 'model.moe.options={"num_moe_experts": 4, "moe_ffn_hidden_size": 33}')" +
                  tensor_parallel(2) + kSequenceParallel);
  BOOST_TEST(width.find("moe_ffn_hidden_size (33) is not divisible by the 2 ranks of the expert_tp group") !=
                 std::string::npos,
             width);
}

// The tp group's traffic in the step records (what comm_mpi was handed through the engine and the
// host) is the design's formula (docs/distributed.md, "What tensor parallelism moves"): a decoder
// layer all-reduces A = b s h activations twice forward (attention's and the MLP's row-parallel
// outputs) and twice backward (their norms' input gradients), 4 A per microbatch; the rest of the
// model the embedding's output forward and the head's input gradient backward (2 A), the
// vocabulary-parallel loss's row maxima, sums and target logits (3 b s), and the gradient norm's
// one float64 per step. Counted as payload bytes: a ring moves 2 (t - 1) / t of them per rank.
BOOST_AUTO_TEST_CASE(tp_traffic_is_the_formula) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string short_run = kModel + " --set train.steps=3";
  train(corpus, root / "l2", 2, short_run + tensor_parallel(2));
  train(corpus, root / "l4", 2, short_run + " --set model.num_layers=4" + tensor_parallel(2));
  const auto tp_all_reduce = [](const fs::path& run) {
    const auto steps = records(run / "metrics.jsonl", "step");
    BOOST_TEST_REQUIRE(steps.size() == 3u);
    const auto& counted = steps.back().at("comm").at("tp").at("all_reduce");
    // Every step the same.
    BOOST_TEST(steps.front().at("comm").at("tp").at("all_reduce") == counted);
    return std::pair{counted.at("calls").to_number<int64_t>(), counted.at("bytes").to_number<int64_t>()};
  };
  const auto [calls2, bytes2] = tp_all_reduce(root / "l2");
  const auto [calls4, bytes4] = tp_all_reduce(root / "l4");
  const int64_t microbatches = 2, b = 4, s = 32, h = 32, f32 = 4;
  const int64_t a = b * s * h;
  // Per decoder layer and step.
  BOOST_TEST((calls4 - calls2) / 2 == microbatches * 4);
  BOOST_TEST((bytes4 - bytes2) / 2 == microbatches * 4 * a * f32);
  // The rest: embedding, head and loss per microbatch, the norm per step.
  BOOST_TEST(calls2 - 2 * microbatches * 4 == microbatches * 4 + 1);
  BOOST_TEST(bytes2 - 2 * microbatches * 4 * a * f32 == microbatches * (2 * a + 3 * b * s) * f32 + 8);
}

// The same with sequence parallelism (design: Korthikanti et al. 2022, as Megatron implements it):
// per decoder layer and microbatch two all-gathers of A forward (the norm's output before
// linear_qkv and linear_fc1), two reduce-scatters forward (after linear_proj and linear_fc2), and
// backward two all-gathers of the output gradient, two of the norm output again (Megatron gathers
// the input anew for the weight gradient rather than keep it) and two reduce-scatters of the
// norm output's gradient: 6 all-gathers and 4 reduce-scatters of A, Megatron's 10 A (t - 1) / t
// moved per rank. Beside the layers: the embedding's reduce-scatter forward and all-gather
// backward, the head's all-gather forward and reduce-scatter backward, the loss's 3 b s values,
// the gradient norm's float64, and once per step the norms' partial gradients (2 per decoder
// layer and the final norm, h each) summed over tp in one all-reduce.
BOOST_AUTO_TEST_CASE(sp_traffic_is_the_formula) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string short_run = kModel + " --set train.steps=3" + kSequenceParallel;
  train(corpus, root / "l2", 2, short_run + tensor_parallel(2));
  train(corpus, root / "l4", 2, short_run + " --set model.num_layers=4" + tensor_parallel(2));
  const auto counted = [](const fs::path& run, const char* kind) {
    const auto steps = records(run / "metrics.jsonl", "step");
    BOOST_TEST_REQUIRE(steps.size() == 3u);
    const auto& c = steps.back().at("comm").at("tp").at(kind);
    return std::pair{c.at("calls").to_number<int64_t>(), c.at("bytes").to_number<int64_t>()};
  };
  const int64_t microbatches = 2, b = 4, s = 32, h = 32, f32 = 4;
  const int64_t a = b * s * h;
  for (const auto& [kind, per_layer, beside] : {std::tuple{"all_gather", int64_t{6}, int64_t{2}},
                                                std::tuple{"reduce_scatter", int64_t{4}, int64_t{2}}}) {
    const auto [calls2, bytes2] = counted(root / "l2", kind);
    const auto [calls4, bytes4] = counted(root / "l4", kind);
    BOOST_TEST((calls4 - calls2) / 2 == microbatches * per_layer, kind);
    BOOST_TEST((bytes4 - bytes2) / 2 == microbatches * per_layer * a * f32, kind);
    BOOST_TEST(calls2 - 2 * microbatches * per_layer == microbatches * beside, kind);
    BOOST_TEST(bytes2 - 2 * microbatches * per_layer * a * f32 == microbatches * beside * a * f32, kind);
  }
  const auto [calls, bytes] = counted(root / "l2", "all_reduce");
  BOOST_TEST(calls == microbatches * 2 + 1 + 1);
  BOOST_TEST(bytes == microbatches * 3 * b * s * f32 + 8 + (2 * 2 + 1) * h * f32);
}

// tp = 2 inside each of pp = 2 stages (4 ranks), against one rank: losses within 1e-6, weights and
// moments within 1e-5. This 4-layer model has elements of fc1 whose gradient is of Adam's eps's
// size (1e-8): there m / (sqrt(v) + eps) is not the gradient's sign but carries its relative
// rounding into a full-size update, which puts those weights 4.7e-6 apart from the first step on
// (tp = 2 without pipeline stages alike; the stages themselves add nothing: pp = 2 alone is
// within 1.7e-7), and Adam's moments then 1.2e-6.
BOOST_AUTO_TEST_CASE(tp_composes_with_pipeline_stages) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string pipelined =
      kModel + R"( --set 'plugins.load=["pipeline_schedules","transformer"]' --set scheduler.component=1f1b)"
               " --set model.num_layers=4";
  train(corpus, root / "whole", 1, pipelined);
  train(corpus, root / "tp2_pp2", 4, pipelined + tensor_parallel(2, ", \"pp\": 2"));
  // Under sequence parallelism the stages pass each rank's block of the stream.
  train(corpus, root / "tp2_pp2_sp", 4, pipelined + tensor_parallel(2, ", \"pp\": 2") + kSequenceParallel);
  for (const char* run : {"tp2_pp2", "tp2_pp2_sp"}) {
    const Difference d = compare_runs(root / "whole", root / run, kSteps);
    BOOST_TEST(d.losses <= kTolerance);
    BOOST_TEST(d.weights <= 1e-5);
    BOOST_TEST(d.moments <= 1e-5);
  }
}

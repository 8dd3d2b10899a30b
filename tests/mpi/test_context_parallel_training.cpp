// Context parallelism through real MPI processes: `mpirun -np N plexus-train` with
// distributed.topology.options.cp against one process holding whole sequences, on the same
// global batch. Each rank holds 2 of the 2 cp chunks of every sequence (load-balanced), RoPE at
// global positions, attention over the cp group by the p2p ring or by all-gather, gradients
// averaged over dp x cp.
//
// What is equal and why not to the bit: a cp rank's queries merge the blocks' softmax in another
// order than the whole sequence's row, the keys' and values' gradients are sums of the ranks'
// parts, and every weight's gradient is the average of the ranks' shares of the tokens (as under
// data parallelism); each is float32 rounding, ~1e-7 relative per step. Adam, which divides each
// gradient element by its own magnitude, turns the reordered sum of a near-cancelling element into
// a large change of that element (measured: 1.5e-5 of an MLP weight after 20 steps with the
// defaults, while the losses agree to 1e-7), so these runs take its division out as
// test_dp_training does (adam_eps = 1: momentum SGD, lr 0.2); then 20 steps stay within 1e-6
// relative for the losses and every weight, and 2e-6 for the moments (a tensor's worst element
// difference over its largest, at least 1e-3; measured 1.8e-7 and 1.3e-6). A missing or wrong key, value or
// query gradient would differ by the order of the step itself.
//
// Reported skipped without mpirun or comm_mpi.
#define BOOST_TEST_MODULE context_parallel_training
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "mpi_launch.hpp"
#include "run_comparison.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "train_corpus.hpp"

using Corpus = plexus::test::TrainCorpus;
namespace fs = std::filesystem;

namespace {

// Four heads (MHA, or GQA in 2 groups), clipping on so the norm over the ranks matters; seq 32
// cuts into 2 x cp chunks for cp = 2 and 4.
const std::string kModel =
    " --set model.num_attention_heads=4 --set optimizer.clip_grad=0.5 --set distributed.timeout_s=60"
    " --set checkpoint.interval=10 --set optimizer.lr_warmup_steps=0 --set optimizer.adam_eps=1"
    " --set optimizer.lr=0.2";
const std::string kGqa = " --set model.num_query_groups=2 --set model.activation=swiglu";
const std::string kHybrid =
    R"( --set 'plugins.load=["sequential_scheduler","transformer","hybrid_stack","mamba"]')"
    " --set 'model.pattern=M*M-' --set model.num_layers=4";
constexpr double kTolerance = 1e-6;
constexpr int kSteps = 20;

std::string topology(const std::string& sizes) {
  return " --set 'distributed.topology.options={" + sizes + "}'";
}

void expect_close(const fs::path& a, const fs::path& b) {
  const plexus::test::RunDifference d = plexus::test::compare_runs(a, b, kSteps, 1e-3);
  BOOST_TEST(d.losses <= kTolerance, b.filename() << ": losses " << d.losses);
  BOOST_TEST(d.weights <= kTolerance, b.filename() << ": weights " << d.weights);
  // The second moment squares the gradient: twice its relative rounding.
  BOOST_TEST(d.moments <= 2 * kTolerance, b.filename() << ": moments " << d.moments);
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the comm_mpi plugin (a build with MPI)")

// MHA and GQA at cp = 2 by the ring and by all-gather, and at cp = 4 by the ring, within 1e-6 of
// cp = 1: losses, validation losses, weights and moments after 20 steps.
BOOST_AUTO_TEST_CASE(gpt_cp_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  for (const auto& [name, model] : {std::pair{"mha", kModel}, std::pair{"gqa", kModel + kGqa}}) {
    const fs::path one = root / (std::string(name) + "_cp1");
    plexus::test::train_ranks(corpus, one, 1, model);
    const fs::path ring = root / (std::string(name) + "_cp2_p2p");
    plexus::test::train_ranks(corpus, ring, 2, model + topology(R"("cp": 2)"));
    expect_close(one, ring);
    const fs::path gathered = root / (std::string(name) + "_cp2_all_gather");
    plexus::test::train_ranks(corpus, gathered, 2,
                              model + topology(R"("cp": 2)") + " --set model.cp_comm_type=all_gather");
    expect_close(one, gathered);
    const auto val = [](const fs::path& run) { return plexus::test::records(run / "metrics.jsonl", "eval"); };
    BOOST_TEST_REQUIRE(val(ring).size() == val(one).size());
    for (std::size_t i = 0; i < val(one).size(); ++i)
      BOOST_TEST(val(ring)[i].at("val_loss").as_double() == val(one)[i].at("val_loss").as_double(),
                 boost::test_tools::tolerance(kTolerance));
  }
  const fs::path four = root / "gqa_cp4_p2p";
  plexus::test::train_ranks(corpus, four, 4, kModel + kGqa + topology(R"("cp": 4)"));
  expect_close(root / "gqa_cp1", four);
}

// cp composed with dp (dp 2 x cp 2: the same global batch as one rank's 2 microbatches), with tp
// and sequence parallelism (tp 2 x cp 2), and with pipeline stages (pp 2 x cp 2, 1F1B).
BOOST_AUTO_TEST_CASE(cp_composes_with_dp_tp_and_pp) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string model = kModel + kGqa;
  plexus::test::train_ranks(corpus, root / "one", 1, model);
  // The corpus's command line has 2 microbatches a step: dp 2 takes one each.
  plexus::test::train_ranks(corpus, root / "dp2_cp2", 4,
                            model + " --set train.microbatches=1" + topology(R"("cp": 2)"));
  expect_close(root / "one", root / "dp2_cp2");
  plexus::test::train_ranks(corpus, root / "tp2_cp2", 4,
                            model + " --set model.sequence_parallel=true" + topology(R"("cp": 2, "tp": 2)"));
  expect_close(root / "one", root / "tp2_cp2");
  plexus::test::train_ranks(corpus, root / "pp2_cp2", 4,
                            model +
                                R"( --set 'plugins.load=["pipeline_schedules","transformer"]')"
                                " --set scheduler.component=1f1b" +
                                topology(R"("cp": 2, "pp": 2)"));
  expect_close(root / "one", root / "pp2_cp2");
}

// What context parallelism does not run is refused by name before training: a sequence that does
// not cut into 2 cp chunks, a layer not built for it, and a Mamba-2 mixer whose groups do not
// divide over cp.
BOOST_AUTO_TEST_CASE(unsupported_cp_runs_are_refused_by_name) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const auto refused = [&](const std::string& name, const std::string& extra) {
    return plexus::test::refused_run(corpus, root / name, 2, kModel + topology(R"("cp": 2)") + extra);
  };
  const std::string odd = refused("odd", " --set model.seq_length=30");
  BOOST_TEST(odd.find("model.seq_length") != std::string::npos, odd);
  BOOST_TEST(odd.find("multiple of 4") != std::string::npos, odd);
  // A layer that does not declare PLX_LAYER_CONTEXT_PARALLEL (here the bidirectional attention,
  // whose context-parallel core is causal only) is refused by the host, by name.
  const std::string no_mask =
      refused("no_mask", R"( --set 'model.attention.options={"attn_mask_type": "no_mask"}')");
  BOOST_TEST(no_mask.find("attn_mask_type") != std::string::npos, no_mask);
  // Mamba-2 at cp 4 with 2 groups: each rank must hold whole groups of heads.
  const std::string mamba = plexus::test::refused_run(
      corpus, root / "mamba", 4,
      kModel + topology(R"("cp": 4)") + kHybrid +
          R"( --set 'model.mamba.options={"mamba_head_dim": 8, "mamba_num_groups": 2}')");
  BOOST_TEST(mamba.find("mamba_num_groups") != std::string::npos, mamba);
  BOOST_TEST(mamba.find("the 4 ranks of the cp group") != std::string::npos, mamba);
}

// A hybrid of Mamba-2, attention and MLP layers (configs/hybrid.json's pattern) at cp 2 and 4:
// each rank runs the mixer on its share of the groups of heads over the whole sequence (the hidden
// states gathered, out_proj's partial sums reduce-scattered back to its chunks), within 1e-6 of
// one rank.
BOOST_AUTO_TEST_CASE(hybrid_mamba_under_cp_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  for (const int cp : {2, 4}) {  // as many groups as ranks: one group each at cp 4
    const std::string hybrid = kModel + kHybrid +
                               R"( --set 'model.mamba.options={"mamba_state_dim": 16, "mamba_head_dim": 16,)"
                               R"( "chunk_size": 16, "mamba_num_groups": )" +
                               std::to_string(cp) + "}'";
    const fs::path one = root / ("cp1_groups" + std::to_string(cp));
    const fs::path split = root / ("cp" + std::to_string(cp));
    plexus::test::train_ranks(corpus, one, 1, hybrid);
    plexus::test::train_ranks(corpus, split, cp, hybrid + topology("\"cp\": " + std::to_string(cp)));
    expect_close(one, split);
  }
}

// The hybrid with tensor parallelism beside cp (tp 2 x cp 2): each rank runs a quarter of the
// groups of heads (its cp share of its tp share) over the whole sequence, the pre-norm's input
// gradient summed over tp x cp; with and without sequence parallelism (the rows gathered over tp
// before cp, and reduce-scattered over cp, then tp). Within 1e-6 of one rank.
BOOST_AUTO_TEST_CASE(hybrid_mamba_under_tp_and_cp_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string hybrid = kModel + kHybrid +
                             R"( --set 'model.mamba.options={"mamba_state_dim": 16, "mamba_head_dim": 16,)"
                             R"( "chunk_size": 16, "mamba_num_groups": 4}')";
  plexus::test::train_ranks(corpus, root / "one", 1, hybrid);
  plexus::test::train_ranks(corpus, root / "tp2_cp2", 4, hybrid + topology(R"("cp": 2, "tp": 2)"));
  expect_close(root / "one", root / "tp2_cp2");
  plexus::test::train_ranks(corpus, root / "tp2_cp2_sp", 4,
                            hybrid + " --set model.sequence_parallel=true" + topology(R"("cp": 2, "tp": 2)"));
  expect_close(root / "one", root / "tp2_cp2_sp");
  // 2 groups do not divide over tp x cp = 4 ranks: refused, naming the option and both sizes.
  const std::string refused = plexus::test::refused_run(
      corpus, root / "groups", 4,
      kModel + kHybrid + topology(R"("cp": 2, "tp": 2)") +
          R"( --set 'model.mamba.options={"mamba_head_dim": 8, "mamba_num_groups": 2}')");
  BOOST_TEST(refused.find("mamba_num_groups (2)") != std::string::npos, refused);
  BOOST_TEST(refused.find("2 x 2 ranks of the tp and cp groups") != std::string::npos, refused);
}

// Multi-token prediction under cp: depth d's tokens and targets are rolled on the whole sequences
// before the cut (a rank's chunks are not contiguous), and its last d ignored targets all fall in
// cp rank 0's last chunk, so the ranks count different tokens: each divides its loss by the ranks'
// mean count, and their average is the mean over the sequences' counted tokens. Two depths, at
// cp 2 and 4, and at tp 2 x cp 2 with sequence parallelism; the depths' losses too.
BOOST_AUTO_TEST_CASE(mtp_under_cp_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string mtp =
      kModel + kGqa + " --set model.mtp_num_layers=2 --set model.mtp_loss_scaling_factor=0.5";
  plexus::test::train_ranks(corpus, root / "cp1", 1, mtp);
  plexus::test::train_ranks(corpus, root / "cp2", 2, mtp + topology(R"("cp": 2)"));
  expect_close(root / "cp1", root / "cp2");
  plexus::test::train_ranks(corpus, root / "cp4", 4, mtp + topology(R"("cp": 4)"));
  expect_close(root / "cp1", root / "cp4");
  plexus::test::train_ranks(corpus, root / "tp2_cp2", 4,
                            mtp + " --set model.sequence_parallel=true" + topology(R"("cp": 2, "tp": 2)"));
  expect_close(root / "cp1", root / "tp2_cp2");
  const auto depth_losses = [](const fs::path& run) {
    std::vector<double> out;
    for (const auto& step : plexus::test::records(run / "metrics.jsonl", "step"))
      for (const auto& depth : step.at("mtp_losses").as_array()) out.push_back(depth.as_double());
    return out;
  };
  const std::vector<double> one = depth_losses(root / "cp1");
  for (const char* run : {"cp2", "cp4", "tp2_cp2"}) {
    const std::vector<double> split = depth_losses(root / run);
    BOOST_TEST_REQUIRE(split.size() == one.size());
    BOOST_TEST_REQUIRE(split.size() == 2U * kSteps);
    for (std::size_t i = 0; i < one.size(); ++i)
      BOOST_TEST(split[i] == one[i], run << " record " << i << boost::test_tools::tolerance(kTolerance));
  }
}

// Megatron's learned absolute positions under cp: each rank adds, and gives gradients to, the
// rows of its tokens' global positions.
BOOST_AUTO_TEST_CASE(learned_absolute_positions_under_cp) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string learned = kModel + R"( --set model.position_embedding_type=\"learned_absolute\")";
  plexus::test::train_ranks(corpus, root / "cp1", 1, learned);
  plexus::test::train_ranks(corpus, root / "cp2", 2, learned + topology(R"("cp": 2)"));
  expect_close(root / "cp1", root / "cp2");
}

// MoE layers under cp: the router's counts and its auxiliary and z losses are the whole
// sequences' (summed over the cp ranks, their gradients counted cp times against the average
// over dp x cp, as Megatron scales them), the experts whole on each rank or divided over ep
// beside cp. Large loss coefficients, so that a wrong scale of their gradients would show.
BOOST_AUTO_TEST_CASE(moe_under_cp_matches_one_rank) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string moe =
      kModel +
      R"( --set 'plugins.load=["sequential_scheduler","transformer","moe"]' --set model.moe.layer_freq=1)"
      R"( --set 'model.moe.options={"num_moe_experts": 4, "moe_router_topk": 2, "moe_aux_loss_coeff": 0.1,)"
      R"( "moe_z_loss_coeff": 0.01, "moe_shared_expert_intermediate_size": 16}')";
  plexus::test::train_ranks(corpus, root / "cp1", 1, moe);
  plexus::test::train_ranks(corpus, root / "cp2", 2, moe + topology(R"("cp": 2)"));
  expect_close(root / "cp1", root / "cp2");
  plexus::test::train_ranks(corpus, root / "cp2_ep2", 2, moe + topology(R"("cp": 2, "ep": 2)"));
  expect_close(root / "cp1", root / "cp2_ep2");
  // The reported aux loss is the whole microbatch's, as on one rank.
  const auto aux = [](const fs::path& run) {
    return plexus::test::records(run / "metrics.jsonl", "step").front().at("moe/layer0.aux_loss").as_double();
  };
  BOOST_TEST(aux(root / "cp2") == aux(root / "cp1"), boost::test_tools::tolerance(1e-6));
}

// What context parallelism is for: a sequence's activations divided over the ranks. At 4096
// tokens one rank keeps each layer's 4 x 4096 x 4096 attention probabilities (256 MiB a layer);
// at cp = 4 each rank holds a quarter of the tokens and, block by block, one log-sum-exp per
// query row instead. Every rank's measured peak resident memory (the metrics' memory_per_rank)
// must be under half of the one rank's; about 200 MiB of every process is libraries and buffers
// that do not shrink (docs/performance.md: 2,361 against 233 MiB with 4 layers of 128).
BOOST_AUTO_TEST_CASE(each_rank_holds_a_fraction_of_a_long_sequence) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string long_sequence =
      " --set model.seq_length=4096 --set train.micro_batch_size=1 --set train.microbatches=1"
      " --set train.steps=1 --set train.eval_iters=1 --set distributed.timeout_s=120 --set "
      "data.split=50,50,0";
  plexus::test::train_ranks(corpus, root / "one", 1, kModel + long_sequence);
  plexus::test::train_ranks(corpus, root / "four", 4, kModel + long_sequence + topology(R"("cp": 4)"));
  const auto peaks = [](const fs::path& run) {
    std::vector<double> out;
    const auto steps = plexus::test::records(run / "metrics.jsonl", "step");
    BOOST_TEST_REQUIRE(!steps.empty());
    for (const auto& rank : steps.back().at("memory_per_rank").as_array())
      out.push_back(static_cast<double>(rank.at("peak_resident_bytes").to_number<int64_t>()));
    return out;
  };
  const std::vector<double> one = peaks(root / "one"), four = peaks(root / "four");
  BOOST_TEST_REQUIRE(one.size() == 1U);
  BOOST_TEST_REQUIRE(four.size() == 4U);
  for (const double rank : four)
    BOOST_TEST(rank < one[0] / 2, rank / (1 << 20) << " MiB against " << one[0] / (1 << 20));
  // plexus model show's estimate of the activations that fall away, against the measured fall of
  // the peak: the peak is the libraries, the parameters and the optimizer (the same at both cp),
  // the activations, and the largest temporary of one call (at cp 1 attention's backward's
  // S x S gradient of one head's probabilities, 64 MiB). Within 15%.
  const auto estimate = [&](int cp) {
    const auto shown =
        plexus::test::run_process(plexus::test::kBin + "plexus model show --json --cp " + std::to_string(cp) +
                                  Corpus::model_flags() + kModel + long_sequence + " 2>/dev/null");
    BOOST_TEST_REQUIRE(shown.status == 0, shown.output);
    return boost::json::parse(shown.output).at("activation_bytes_per_microbatch").to_number<double>();
  };
  const double estimated = estimate(1) - estimate(4);
  const double measured = one[0] - *std::max_element(four.begin(), four.end());
  BOOST_TEST_MESSAGE("activations estimated to fall by " << estimated / (1 << 20) << " MiB, the peak fell by "
                                                         << measured / (1 << 20) << " MiB");
  BOOST_TEST(std::abs(measured - estimated) <= 0.15 * estimated,
             "estimated " << estimated / (1 << 20) << " MiB, measured " << measured / (1 << 20) << " MiB");
}

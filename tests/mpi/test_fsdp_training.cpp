// The data-parallel strategies of plugin fsdp through real MPI processes: `mpirun -np N
// plexus-train` with distributed.data_parallel.options.strategy = optim (ZeRO-1), optim_grads
// (ZeRO-2) or optim_grads_params (ZeRO-3 / FSDP) against no_shard (DDP) on the same tokens, with
// gradient accumulation (2 microbatches) and clipping on.
//
// Every strategy computes the same averages; what differs is the order of floating-point sums: a
// reduce-scatter instead of an all-reduce, ZeRO-2/3 reducing each microbatch's gradients before
// adding them where DDP adds them first, and the gradient norm summed shard by shard. So losses
// and final weights and Adam moments agree within 1e-6 relative (fp32 rounding of a reordered
// sum is ~1e-7), as in test_dp_training. A gradient missed, reduced twice or averaged over the
// wrong group, or a shard updated from another rank's slice, is a difference of the size of the
// update. mHC is tested with Adam's division taken out (test_dp_training explains why).
// Also: memory per rank, resume across strategies and data-parallel sizes, expert parallelism, the
// combined 1F1B scheduler, and the refusals. Reported skipped without mpirun or comm_mpi.
#define BOOST_TEST_MODULE fsdp_training
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
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
using plexus::test::worst_difference;
using Corpus = plexus::test::TrainCorpus;
namespace fs = std::filesystem;

namespace {

constexpr double kRelative = 1e-6;
// Clipping at 0.5 is active on most of these steps (the norms are about 1 to 3).
const std::string kRun =
    " --set train.steps=20 --set train.microbatches=2 --set optimizer.clip_grad=0.5 --set distributed.timeout_s=60";

std::string strategy(const std::string& name) {
  return " --set 'distributed.data_parallel.options={\"strategy\": \"" + name + "\"}'";
}

// Two runs of 10 steps: the same losses, and the same weights and moments in their last checkpoints.
void expect_same_run(const fs::path& a, const fs::path& b, double floor = 0, const std::string& step = "step_00000020") {
  const std::vector<double> la = step_losses(a / "metrics.jsonl");
  const std::vector<double> lb = step_losses(b / "metrics.jsonl");
  BOOST_TEST_REQUIRE(la.size() == lb.size());
  BOOST_TEST_REQUIRE(!la.empty());
  for (std::size_t i = 0; i < la.size(); ++i)
    BOOST_TEST(std::abs(la[i] - lb[i]) <= kRelative * std::abs(la[i]), "step " << i + 1 << ": " << la[i] << " vs " << lb[i]);
  const auto ca = plexus::checkpoint::load_checkpoint(a / "checkpoints" / step);
  const auto cb = plexus::checkpoint::load_checkpoint(b / "checkpoints" / step);
  const double weights = worst_difference(ca.model, cb.model, floor);
  const double moments = worst_difference(ca.optimizer, cb.optimizer, floor);
  BOOST_TEST_MESSAGE(a.filename() << " vs " << b.filename() << ": weights " << weights << ", moments " << moments);
  BOOST_TEST(weights <= kRelative);
  BOOST_TEST(moments <= kRelative);
}

// The last step record's memory of rank r.
boost::json::object memory_of(const fs::path& run, std::size_t rank) {
  const auto steps = records(run / "metrics.jsonl", "step");
  BOOST_TEST_REQUIRE(!steps.empty());
  return steps.back().at("memory_per_rank").as_array().at(rank).as_object();
}

int64_t bytes(const boost::json::object& memory, const char* key) {
  return memory.at(key).as_int64();
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the comm_mpi plugin (a build with MPI)")

BOOST_AUTO_TEST_CASE(every_strategy_on_two_ranks_matches_ddp) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  for (const char* name : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
    const auto result = run_process(mpirun_command(2) + corpus.train((root / name).string(), kRun + strategy(name)));
    BOOST_TEST_REQUIRE(result.status == 0, result.output);
  }
  const auto losses = step_losses(root / "no_shard" / "metrics.jsonl");
  BOOST_TEST(losses.back() < losses.front());
  for (const char* name : {"optim", "optim_grads", "optim_grads_params"}) expect_same_run(root / "no_shard", root / name);
  // The strategy is named in the log and the start record.
  const auto starts = records(root / "optim_grads_params" / "metrics.jsonl", "start");
  BOOST_TEST_REQUIRE(starts.size() == 1u);
  BOOST_TEST(starts[0].at("memory_per_rank").as_array().size() == 2u);
}

// Four ranks, and the memory each holds: ZeRO-3's parameters, gradients and moments are a quarter
// of DDP's, plus at most two whole units (the one computing and the one prefetched) and padding.
BOOST_AUTO_TEST_CASE(four_ranks_match_ddp_and_hold_a_quarter_of_its_memory) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string run = " --set train.steps=20 --set train.microbatches=1 --set optimizer.clip_grad=0.5"
                          " --set distributed.timeout_s=60";
  for (const char* name : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
    const auto result = run_process(mpirun_command(4) + corpus.train((root / name).string(), run + strategy(name)));
    BOOST_TEST_REQUIRE(result.status == 0, result.output);
  }
  for (const char* name : {"optim", "optim_grads", "optim_grads_params"}) expect_same_run(root / "no_shard", root / name);

  const auto start = records(root / "optim_grads_params" / "metrics.jsonl", "start").at(0);
  const int64_t largest_unit = start.at("data_parallel").at("largest_unit_bytes").as_int64();
  const auto ddp = memory_of(root / "no_shard", 0);
  const int64_t ddp_params = bytes(ddp, "parameter_bytes");
  BOOST_TEST(bytes(ddp, "gradient_bytes") == ddp_params);
  BOOST_TEST(bytes(ddp, "optimizer_bytes") == 2 * ddp_params);
  // Padding: each unit's buffer rounds up to a multiple of 4 ranks x 16 elements.
  const int64_t buffers = start.at("data_parallel").at("buffers").as_int64();
  const int64_t padding = buffers * 4 * 16 * 4;
  for (std::size_t r = 0; r < 4; ++r) {
    const auto zero1 = memory_of(root / "optim", r);
    BOOST_TEST(bytes(zero1, "parameter_bytes") <= ddp_params + padding);
    BOOST_TEST(bytes(zero1, "optimizer_bytes") <= 2 * (ddp_params + padding) / 4);
    const auto zero2 = memory_of(root / "optim_grads", r);
    BOOST_TEST(bytes(zero2, "gradient_bytes") <= (ddp_params + padding) / 4);
    BOOST_TEST(bytes(zero2, "peak_gradient_bytes") <= (ddp_params + padding) / 4 + 2 * largest_unit);
    const auto zero3 = memory_of(root / "optim_grads_params", r);
    BOOST_TEST(bytes(zero3, "parameter_bytes") <= (ddp_params + padding) / 4);
    BOOST_TEST(bytes(zero3, "peak_parameter_bytes") <= (ddp_params + padding) / 4 + 2 * largest_unit);
    // At the busiest moment of backward: the shards, the computing unit's values and gradients,
    // the prefetched unit's values and the gradients of the unit still being reduce-scattered.
    const int64_t held = bytes(zero3, "peak_parameter_and_gradient_bytes") + bytes(zero3, "optimizer_bytes");
    BOOST_TEST(held <= (4 * ddp_params + 4 * padding) / 4 + 4 * largest_unit, "rank " << r << " holds " << held);
    BOOST_TEST_MESSAGE("rank " << r << ": ZeRO-3 holds at most " << held << " bytes against DDP's " << 4 * ddp_params);
    BOOST_TEST(bytes(zero3, "peak_resident_bytes") > 0);
  }
}

// mHC's connection parameters are sharded with their layer's unit: a GPT with mHC under ZeRO-3 and
// ZeRO-1 against DDP, with Adam's division taken out (adam_eps = 1, lr 0.2; test_dp_training says
// why), judged against max(largest value, 1e-3).
BOOST_AUTO_TEST_CASE(mhc_under_zero3_matches_ddp) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string mhc = " --set mhc.enabled=true --set mhc.backend=mhc_fused"
                          " --set 'plugins.load=[\"sequential_scheduler\", \"transformer\", \"mhc_fused\"]'"
                          " --set optimizer.adam_eps=1 --set optimizer.lr=0.2";
  for (const char* name : {"no_shard", "optim", "optim_grads_params"}) {
    const auto result = run_process(mpirun_command(2) + corpus.train((root / name).string(), kRun + mhc + strategy(name)));
    BOOST_TEST_REQUIRE(result.status == 0, result.output);
  }
  expect_same_run(root / "no_shard", root / "optim", 1e-3);
  expect_same_run(root / "no_shard", root / "optim_grads_params", 1e-3);
  const auto weights = plexus::checkpoint::load_checkpoint(root / "optim_grads_params" / "checkpoints" / "step_00000020");
  BOOST_TEST(weights.model.contains("decoder.layers.1.mlp_hyper_connection.bias"));
}

// Resume across strategies and data-parallel sizes (the same global batch): 5 steps of ZeRO-3 on
// 2 ranks, then 5 more under DDP on 4 ranks, ZeRO-1 on 4 ranks and ZeRO-3 on 2 ranks. Each equals
// the uninterrupted ZeRO-3 run within 1e-6 (the data order is the same; the order of the gradient
// sums changes with the strategy and the size, so only the same strategy on the same ranks is
// bit-exact, and is checked to be). Then DDP's checkpoint continues under ZeRO-3.
BOOST_AUTO_TEST_CASE(checkpoints_resume_across_strategies_and_sizes) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string two = " --set train.microbatches=2 --set distributed.timeout_s=60 --set optimizer.clip_grad=0.5";
  const std::string four = " --set train.microbatches=1 --set distributed.timeout_s=60 --set optimizer.clip_grad=0.5";
  const auto whole = run_process(mpirun_command(2) + corpus.train((root / "whole").string(),
                                                                  two + " --set train.steps=10" + strategy("optim_grads_params")));
  BOOST_TEST_REQUIRE(whole.status == 0, whole.output);
  const auto first = run_process(mpirun_command(2) + corpus.train((root / "first").string(),
                                                                  two + " --set train.steps=5" + strategy("optim_grads_params")));
  BOOST_TEST_REQUIRE(first.status == 0, first.output);
  const fs::path ckpt = root / "first" / "checkpoints" / "step_00000005";
  const std::string resume = " --set train.steps=10 --resume " + quote(ckpt.string());
  struct Continuation {
    const char* name;
    int ranks;
    const char* strategy;
  };
  for (const Continuation& c : {Continuation{"ddp4", 4, "no_shard"}, Continuation{"zero1_4", 4, "optim"},
                                Continuation{"zero3_2", 2, "optim_grads_params"}}) {
    const std::string extra = (c.ranks == 4 ? four : two) + resume + strategy(c.strategy);
    const auto result = run_process(mpirun_command(c.ranks) + corpus.train((root / c.name).string(), extra));
    BOOST_TEST_REQUIRE(result.status == 0, result.output);
    const auto a = plexus::checkpoint::load_checkpoint(root / "whole" / "checkpoints" / "step_00000010");
    const auto b = plexus::checkpoint::load_checkpoint(root / c.name / "checkpoints" / "step_00000010");
    const double weights = worst_difference(a.model, b.model, 0);
    const double moments = worst_difference(a.optimizer, b.optimizer, 0);
    BOOST_TEST_MESSAGE(c.name << ": weights " << weights << ", moments " << moments);
    BOOST_TEST(weights <= kRelative);
    BOOST_TEST(moments <= kRelative);
  }
  // A ZeRO-3 run resumed under ZeRO-3 on the same ranks continues bit-exactly.
  const auto same = plexus::checkpoint::load_checkpoint(root / "zero3_2" / "checkpoints" / "step_00000010");
  const auto reference = plexus::checkpoint::load_checkpoint(root / "whole" / "checkpoints" / "step_00000010");
  BOOST_TEST(worst_difference(reference.model, same.model, 0) == 0.0);
  // And the reverse: DDP's checkpoint under ZeRO-3.
  const auto back = run_process(mpirun_command(2) +
                                corpus.train((root / "back").string(), two + " --set train.steps=12 --resume " +
                                                                          quote((root / "ddp4" / "checkpoints" / "step_00000010").string()) +
                                                                          strategy("optim_grads_params")));
  BOOST_TEST(back.status == 0, back.output);
}

// An MoE GPT with experts over ep = 2 on 4 ranks: the experts' units are sharded over their
// "expert_dp" group (2 ranks), the rest over dp (4). ZeRO-3 against DDP, and the combined 1F1B
// scheduler (gathers at stage granularity, two microbatches in flight) against the sequential one
// under ZeRO-3: bit-identical.
BOOST_AUTO_TEST_CASE(moe_with_expert_parallelism_and_the_combined_scheduler) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string moe =
      " --set model.moe.layer_freq=1"
      " --set 'model.moe.options={\"num_moe_experts\": 4, \"moe_router_topk\": 2, \"moe_aux_loss_coeff\": 0.01}'"
      " --set 'distributed.topology.options={\"ep\": 2}'";
  const std::string run = " --set train.steps=20 --set train.microbatches=2 --set optimizer.clip_grad=0.5"
                          " --set distributed.timeout_s=60" + moe;
  const std::string combined = " --set scheduler.component=combined_1f1b"
                               " --set 'plugins.load=[\"sequential_scheduler\", \"transformer\", \"moe\", \"combined_1f1b\"]'";
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::string>>{
           {"ddp", strategy("no_shard")},
           {"zero3", strategy("optim_grads_params")},
           {"zero3_combined", strategy("optim_grads_params") + combined}}) {
    const auto result = run_process(mpirun_command(4) + corpus.train((root / name).string(), run + extra));
    BOOST_TEST_REQUIRE(result.status == 0, result.output);
  }
  expect_same_run(root / "ddp", root / "zero3");
  const auto a = plexus::checkpoint::load_checkpoint(root / "zero3" / "checkpoints" / "step_00000020");
  const auto b = plexus::checkpoint::load_checkpoint(root / "zero3_combined" / "checkpoints" / "step_00000020");
  BOOST_TEST(worst_difference(a.model, b.model, 0) == 0.0);
  BOOST_TEST(step_losses(root / "zero3" / "metrics.jsonl") == step_losses(root / "zero3_combined" / "metrics.jsonl"));
  BOOST_TEST(a.model.contains("decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"));
}

// A Mamba/attention hybrid whose HybridStack groups are the units: "[M*][M-]" is two logical
// layers of two sublayers each, every group gathered once for both. ZeRO-3 against DDP, and two
// groups per unit refused as the whole decoder.
BOOST_AUTO_TEST_CASE(a_hybrid_with_groups_as_units_under_zero3_matches_ddp) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string hybrid =
      " --set 'model.pattern=[M*][M-]' --set model.num_layers=4"
      " --set 'model.mamba.options={\"mamba_state_dim\": 8, \"mamba_head_dim\": 16, \"mamba_num_groups\": 2, "
      "\"chunk_size\": 12}'";
  for (const char* name : {"no_shard", "optim_grads_params"}) {
    const auto result =
        run_process(mpirun_command(2) + corpus.train((root / name).string(), kRun + hybrid + strategy(name)));
    BOOST_TEST_REQUIRE(result.status == 0, result.output);
  }
  expect_same_run(root / "no_shard", root / "optim_grads_params");
  const auto start = records(root / "optim_grads_params" / "metrics.jsonl", "start").at(0);
  BOOST_TEST(start.at("data_parallel").at("units").as_int64() == 4);  // embedding, two groups, output layers
  const auto whole = run_process(mpirun_command(2) + corpus.train((root / "whole").string(),
                                                                  kRun + hybrid + strategy("optim_grads_params") +
                                                                      " --set distributed.data_parallel.layers_per_unit=2"));
  BOOST_TEST(whole.status != 0);
  BOOST_TEST(whole.output.find("would make the whole decoder (2 logical layers) one unit") != std::string::npos,
             whole.output);
}

BOOST_AUTO_TEST_CASE(bad_unit_and_strategy_choices_are_refused) {
  Corpus corpus;
  const fs::path out = corpus.dir.path() / "run";
  // The model has 2 logical decoder layers.
  const auto whole = run_process(mpirun_command(2) +
                                 corpus.train(out.string(), " --set distributed.data_parallel.layers_per_unit=2"));
  BOOST_TEST(whole.status != 0);
  BOOST_TEST(whole.output.find("distributed.data_parallel.layers_per_unit") != std::string::npos, whole.output);
  BOOST_TEST(whole.output.find("would make the whole decoder (2 logical layers) one unit") != std::string::npos,
             whole.output);
  const auto odd = run_process(mpirun_command(2) + corpus.train(out.string(), " --set model.num_layers=3"
                                                                              " --set distributed.data_parallel.layers_per_unit=2"));
  BOOST_TEST(odd.status != 0);
  BOOST_TEST(odd.output.find("does not divide the decoder's 3 logical layers") != std::string::npos, odd.output);
  const auto unknown = run_process(mpirun_command(2) + corpus.train(out.string(), strategy("optim_grad")));
  BOOST_TEST(unknown.status != 0);
  BOOST_TEST(unknown.output.find("distributed.data_parallel.options.strategy") != std::string::npos, unknown.output);
  BOOST_TEST(unknown.output.find("optim_grads") != std::string::npos, unknown.output);
  BOOST_TEST(!fs::exists(out / "metrics.jsonl"));
}

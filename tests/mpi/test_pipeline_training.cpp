// Pipeline parallelism through real MPI processes: `mpirun -np N plexus-train` with
// distributed.topology.options.pp = N against one process holding the whole model, on the same
// global batch (the same microbatches).
//
// What is bit-exact and why: a stage runs exactly the arithmetic the whole model runs for its
// layers, in the same order per microbatch; the activations and their gradients cross stages
// unchanged (fp32 copies); every parameter's gradient is accumulated over the microbatches in
// microbatch order on the one stage that holds it; the gradient norm adds the stages' squares in
// the global parameter order (PipelineStages::ordered_sum). So untied models at pp = 2 and 4, with
// or without virtual stages, under 1F1B or interleaved 1F1B, equal pp = 1 to the last bit, and are
// checked to. Tied embeddings are the exception Megatron has too: at pp = 1 the word embedding's
// gradient is one buffer the head and the embedding add into microbatch by microbatch; across
// stages each side sums its own microbatches and the embedding group adds the two sums, another
// order of the same fp32 sum, ~1e-7 relative per step (then carried by Adam).
//
// Also: the in-flight bound of 1F1B (rank r holds at most P - r microbatches), resume across
// pipeline sizes (2 -> 1 -> 4), the trace, and the refusals. Reported skipped without mpirun or
// comm_mpi.
#define BOOST_TEST_MODULE pipeline_training
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
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

using plexus::test::compare_runs;
using plexus::test::mpirun_command;
using plexus::test::quote;
using plexus::test::records;
using plexus::test::run_process;
using plexus::test::step_dir;
using plexus::test::step_losses;
using plexus::test::worst_difference;
using Corpus = plexus::test::TrainCorpus;
namespace fs = std::filesystem;

namespace {

// Four layers, so that pp = 4 and two virtual stages of pp = 2 each get one; four microbatches,
// the fewest the interleaved schedule takes at pp = 2 with two virtual stages and enough for
// 1F1B's steady state at pp = 4. Clipping on (the norm is the stages' sum).
const std::string kModel =
    " --set model.num_layers=4 --set train.microbatches=4 --set train.steps=6 --set optimizer.clip_grad=0.5"
    " --set distributed.timeout_s=60";
const std::string kUntied = " --set model.untie_embeddings_and_output_weights=true";
const std::string kSchedules = R"( --set 'plugins.load=["pipeline_schedules","transformer"]')";

std::string pipeline(int pp, const std::string& schedule = "1f1b") {
  return " --set 'distributed.topology.options={\"pp\": " + std::to_string(pp) +
         "}' --set scheduler.component=" + schedule;
}

using Difference = plexus::test::RunDifference;

void expect_identical(const fs::path& a, const fs::path& b, int step) {
  const Difference d = compare_runs(a, b, step);
  BOOST_TEST(d.losses == 0.0, b.filename() << ": losses differ from " << a.filename());
  BOOST_TEST(d.weights == 0.0, b.filename() << ": weights differ from " << a.filename());
  BOOST_TEST(d.moments == 0.0, b.filename() << ": moments differ from " << a.filename());
}

void train(const Corpus& corpus, const fs::path& out, int ranks, const std::string& extra) {
  plexus::test::train_ranks(corpus, out, ranks, extra);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  BOOST_TEST_REQUIRE(in.good(), "cannot read " << path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string refused(const Corpus& corpus, const fs::path& out, int ranks, const std::string& extra) {
  return plexus::test::refused_run(corpus, out, ranks, extra);
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(plexus::test::have_mpirun() && plexus::test::comm_mpi_built(),
                          "needs mpirun and the comm_mpi plugin (a build with MPI)")

// The GPT with untied embeddings at pp = 2 and 4 under 1F1B, at pp = 2 with two virtual stages
// under interleaved 1F1B, and at pp = 2 with an uneven split (1 + 3 layers): every loss, weight
// and moment equal to pp = 1's. And 1F1B's memory bound: rank r of P held at most P - r
// microbatches' activations at once (exactly that many: warmup P - r - 1, then one more).
BOOST_AUTO_TEST_CASE(gpt_stages_equal_one_stage_bit_for_bit) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  train(corpus, root / "whole", 1, kModel + kUntied);
  train(corpus, root / "pp2", 2, kModel + kUntied + kSchedules + pipeline(2));
  train(corpus, root / "pp4", 4, kModel + kUntied + kSchedules + pipeline(4));
  train(corpus, root / "pp2_vpp2", 2,
        kModel + kUntied + kSchedules + pipeline(2, "interleaved_1f1b") +
            " --set distributed.pipeline.virtual_stages=2");
  train(corpus, root / "pp2_uneven", 2,
        kModel + kUntied + kSchedules + pipeline(2) + " --set distributed.pipeline.first_stage_layers=1");
  for (const char* run : {"pp2", "pp4", "pp2_vpp2", "pp2_uneven"})
    expect_identical(root / "whole", root / run, 6);

  const auto losses = step_losses(root / "pp4" / "metrics.jsonl");
  BOOST_TEST(losses.back() < losses.front());
  // The start record describes the stages; a step record the microbatches in flight per stage.
  const auto start = records(root / "pp4" / "metrics.jsonl", "start").at(0);
  const auto& layout = start.at("pipeline").as_object();
  BOOST_TEST(layout.at("stages").as_int64() == 4);
  BOOST_TEST(layout.at("chunks").as_array().size() == 4u);
  for (const auto& [run, stages] : {std::pair{"pp2", 2}, std::pair{"pp4", 4}}) {
    const auto steps = records(root / run / "metrics.jsonl", "step");
    const auto& in_flight = steps.back().at("microbatches_in_flight_per_stage").as_array();
    BOOST_TEST_REQUIRE(in_flight.size() == static_cast<std::size_t>(stages));
    for (int r = 0; r < stages; ++r) {
      const int64_t held = in_flight[static_cast<std::size_t>(r)].as_int64();
      BOOST_TEST(held <= stages - r, run << " stage " << r << " held " << held << " microbatches");
      BOOST_TEST(held == std::min(stages - r, 4), run << " stage " << r);
    }
  }
  // The whole model's parameters are counted once over the stages.
  BOOST_TEST(records(root / "whole" / "metrics.jsonl", "start").at(0).at("parameters") ==
             start.at("parameters"));
}

// Tied embeddings (the default): the first and last stages hold the word embedding and the head
// weight, copied at initialization and their gradients summed over the embedding group. Within
// 1e-6 of pp = 1 for losses, weights and moments (see the file's comment for why not bit-exact;
// measured about 2e-7). The checkpoint holds the tensor once.
BOOST_AUTO_TEST_CASE(tied_embeddings_across_stages_match_one_stage) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  train(corpus, root / "whole", 1, kModel);
  train(corpus, root / "pp2", 2, kModel + kSchedules + pipeline(2));
  train(corpus, root / "pp4", 4, kModel + kSchedules + pipeline(4));
  for (const char* run : {"pp2", "pp4"}) {
    const Difference d = compare_runs(root / "whole", root / run, 6);
    BOOST_TEST(d.losses <= 1e-6);
    BOOST_TEST(d.weights <= 1e-6);
    BOOST_TEST(d.moments <= 1e-6);
  }
  const auto saved = plexus::checkpoint::load_checkpoint(root / "pp4" / "checkpoints" / step_dir(6));
  const auto whole = plexus::checkpoint::load_checkpoint(root / "whole" / "checkpoints" / step_dir(6));
  BOOST_TEST(saved.model.size() == whole.model.size());
  for (const std::string& name : whole.model.names()) BOOST_TEST(saved.model.contains(name), name);
}

// The other models and strategies the engine composes with stages: a hybrid pattern with '|'
// segments (run unchanged at pp = 1), MoE with experts over ep = 2 under the combined 1F1B EP
// overlap composed with the pipeline schedule, mHC, and ZeRO-1 / ZeRO-3 over dp = 2 beside pp = 2.
// Each is bit-exact against pp = 1 on the same data-parallel and expert-parallel ranks.
BOOST_AUTO_TEST_CASE(hybrid_moe_mhc_and_zero_stages_equal_one_stage) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string hybrid =
      kUntied + R"( --set 'plugins.load=["pipeline_schedules","transformer","hybrid_stack","mamba"]')"
                " --set 'model.pattern=M*|M-|M*|M-' --set model.num_layers=8 --set train.microbatches=4"
                " --set train.steps=4 --set distributed.timeout_s=60"
                " --set 'model.mamba.options={\"mamba_state_dim\": 16, \"mamba_head_dim\": 16, "
                "\"mamba_num_groups\": 1, \"chunk_size\": 16}'";
  train(corpus, root / "hybrid_whole", 1, hybrid + " --set scheduler.component=1f1b");
  train(corpus, root / "hybrid_pp2", 2, hybrid + pipeline(2, "interleaved_1f1b"));
  expect_identical(root / "hybrid_whole", root / "hybrid_pp2", 4);

  const std::string mhc = kModel + kUntied +
                          R"( --set 'plugins.load=["pipeline_schedules","transformer","mhc_native"]')"
                          " --set mhc.enabled=true --set mhc.backend=mhc_native";
  train(corpus, root / "mhc_whole", 1, mhc + " --set scheduler.component=1f1b");
  train(corpus, root / "mhc_pp2", 2, mhc + pipeline(2));
  expect_identical(root / "mhc_whole", root / "mhc_pp2", 6);

  // ep = 2 and dp = 2 need the same two ranks at pp = 1; pp = 2 doubles them.
  const std::string moe = kModel + kUntied +
                          R"( --set 'plugins.load=["pipeline_schedules","transformer"]')"
                          " --set model.moe.layer_freq=2"
                          " --set 'model.moe.options={\"num_moe_experts\": 4, \"moe_router_topk\": 2}'";
  const std::string overlap = R"( --set 'scheduler.options={"overlap_moe_expert_parallel_comm": true}')";
  train(corpus, root / "moe_whole", 2,
        moe + " --set 'distributed.topology.options={\"ep\": 2}' --set scheduler.component=1f1b");
  // With pipelining the overlap runs in the interleaved schedule (as Megatron requires).
  train(corpus, root / "moe_pp2", 4,
        moe +
            " --set 'distributed.topology.options={\"ep\": 2, \"pp\": 2}' --set "
            "scheduler.component=interleaved_1f1b" +
            " --set distributed.pipeline.virtual_stages=2" + overlap);
  expect_identical(root / "moe_whole", root / "moe_pp2", 6);

  for (const char* strategy : {"optim", "optim_grads_params"}) {
    const std::string zero = kModel + kUntied + kSchedules +
                             " --set 'distributed.data_parallel.options={\"strategy\": \"" + strategy +
                             "\"}'";
    const std::string name = std::string("zero_") + strategy;
    train(corpus, root / (name + "_whole"), 2, zero + " --set scheduler.component=1f1b");
    train(corpus, root / (name + "_pp2"), 4, zero + pipeline(2));
    expect_identical(root / (name + "_whole"), root / (name + "_pp2"), 6);
  }
}

// Multi-token prediction on the last stage (Megatron's place: with the head, on the last virtual
// stage): the GPT's two MTP blocks at pp = 2 and 4 under 1F1B and at pp = 2 with virtual stages
// under interleaved 1F1B, a hybrid pattern with '|' segments and '/' blocks at pp = 2, and ZeRO-3
// beside pp = 2, tied and untied, and MoE with ep = 2 under the EP overlap. The
// last stage holds its own copy of the word embedding for the MTP blocks even untied (as
// Megatron), whose gradient the embedding group sums after the data-parallel reduction: another
// order of the same fp32 sum, so within 1e-6 of pp = 1 (as tied embeddings), not bit-exact. The
// per-depth losses agree as closely, and the checkpoints hold pp = 1's tensors.
BOOST_AUTO_TEST_CASE(mtp_blocks_on_the_last_stage_match_one_stage) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string mtp = kModel + kUntied + kSchedules + " --set model.mtp_num_layers=2";
  train(corpus, root / "whole", 1, mtp + " --set scheduler.component=1f1b");
  train(corpus, root / "pp2", 2, mtp + pipeline(2));
  train(corpus, root / "pp4", 4, mtp + pipeline(4));
  train(corpus, root / "pp2_vpp2", 2,
        mtp + pipeline(2, "interleaved_1f1b") + " --set distributed.pipeline.virtual_stages=2");

  const std::string hybrid =
      kUntied + R"( --set 'plugins.load=["pipeline_schedules","transformer","hybrid_stack"]')"
                " --set 'model.pattern=*-|*-/*-' --set model.num_layers=4 --set train.microbatches=4"
                " --set train.steps=4 --set distributed.timeout_s=60";
  train(corpus, root / "hybrid_whole", 1, hybrid + " --set scheduler.component=1f1b");
  train(corpus, root / "hybrid_pp2", 2, hybrid + pipeline(2));
  // ZeRO-3 over dp = 2. Tied, the last stage's embedding copy is the head's FSDP unit, which the
  // MTP depths read; untied, the first depth's embedding is the copy's unit.
  const std::string zero3 =
      kModel + kSchedules + " --set model.mtp_num_layers=2" +
      R"( --set 'distributed.data_parallel.options={"strategy": "optim_grads_params"}')";
  train(corpus, root / "zero3_whole", 2, zero3 + " --set scheduler.component=1f1b");
  train(corpus, root / "zero3_pp2", 4, zero3 + pipeline(2));
  train(corpus, root / "zero3_untied_whole", 2, zero3 + kUntied + " --set scheduler.component=1f1b");
  train(corpus, root / "zero3_untied_pp2", 4, zero3 + kUntied + pipeline(2));
  // One depth (Megatron's limit under the EP overlap) copying an MoE layer, ep = 2, under the
  // interleaved schedule's combined steps.
  const std::string moe = kModel + kUntied + kSchedules +
                          " --set model.mtp_num_layers=1 --set model.moe.layer_freq=2" +
                          R"( --set 'model.moe.options={"num_moe_experts": 4, "moe_router_topk": 2}')";
  train(corpus, root / "moe_whole", 2,
        moe + " --set 'distributed.topology.options={\"ep\": 2}' --set scheduler.component=1f1b");
  train(corpus, root / "moe_pp2", 4,
        moe +
            " --set 'distributed.topology.options={\"ep\": 2, \"pp\": 2}' --set "
            "scheduler.component=interleaved_1f1b" +
            " --set distributed.pipeline.virtual_stages=2" +
            R"( --set 'scheduler.options={"overlap_moe_expert_parallel_comm": true}')");

  const auto depth_losses = [](const fs::path& run) {
    std::vector<double> all;
    for (const auto& step : records(run / "metrics.jsonl", "step"))
      for (const auto& loss : step.at("mtp_losses").as_array()) all.push_back(loss.as_double());
    return all;
  };
  for (const auto& [whole, run, steps] :
       {std::tuple{"whole", "pp2", 6}, std::tuple{"whole", "pp4", 6}, std::tuple{"whole", "pp2_vpp2", 6},
        std::tuple{"hybrid_whole", "hybrid_pp2", 4}, std::tuple{"zero3_whole", "zero3_pp2", 6},
        std::tuple{"zero3_untied_whole", "zero3_untied_pp2", 6}, std::tuple{"moe_whole", "moe_pp2", 6}}) {
    const Difference d = compare_runs(root / whole, root / run, steps);
    BOOST_TEST(d.losses <= 1e-6, run);
    BOOST_TEST(d.weights <= 1e-6, run);
    BOOST_TEST(d.moments <= 1e-6, run);
    const std::vector<double> a = depth_losses(root / whole), b = depth_losses(root / run);
    BOOST_TEST_REQUIRE(a.size() == b.size());
    BOOST_TEST_REQUIRE(!a.empty());
    for (std::size_t i = 0; i < a.size(); ++i)
      BOOST_TEST(std::abs(a[i] - b[i]) <= 1e-6 * std::abs(a[i]), run << " MTP loss " << i);
    const auto merged = plexus::checkpoint::load_checkpoint(root / run / "checkpoints" / step_dir(steps));
    const auto one = plexus::checkpoint::load_checkpoint(root / whole / "checkpoints" / step_dir(steps));
    BOOST_TEST((merged.model.names() == one.model.names()), run);
  }
  BOOST_TEST(plexus::checkpoint::load_checkpoint(root / "hybrid_pp2" / "checkpoints" / step_dir(4))
                 .model.contains("mtp.layers.0.mtp_model_layer.layers.1.mlp.linear_fc2.weight"));
}

// Checkpoints do not depend on the pipeline: 2 steps at pp = 2, 2 more at pp = 1, 2 more at pp = 4
// with the tensors written once under their global names, and the result is the uninterrupted
// pp = 1 run's to the last bit (untied, so every layout computes the same sums).
BOOST_AUTO_TEST_CASE(resume_across_pipeline_sizes) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  const std::string model = kModel + kUntied + kSchedules + " --set checkpoint.interval=2";
  train(corpus, root / "whole", 1, model + " --set scheduler.component=1f1b");
  train(corpus, root / "a", 2, model + pipeline(2) + " --set train.steps=2");
  train(corpus, root / "b", 1,
        model + " --set scheduler.component=1f1b --set train.steps=4 --resume " +
            quote((root / "a" / "checkpoints" / step_dir(2)).string()));
  train(corpus, root / "c", 4,
        model + pipeline(4) + " --set train.steps=6 --resume " +
            quote((root / "b" / "checkpoints" / step_dir(4)).string()));
  const auto whole = plexus::checkpoint::load_checkpoint(root / "whole" / "checkpoints" / step_dir(6));
  const auto resumed = plexus::checkpoint::load_checkpoint(root / "c" / "checkpoints" / step_dir(6));
  BOOST_TEST(worst_difference(whole.model, resumed.model, 0) == 0.0);
  BOOST_TEST(worst_difference(whole.optimizer, resumed.optimizer, 0) == 0.0);
  // The pp = 2 checkpoint is the pp = 1 one's set of tensors.
  const auto a = plexus::checkpoint::load_checkpoint(root / "a" / "checkpoints" / step_dir(2));
  const auto w = plexus::checkpoint::load_checkpoint(root / "whole" / "checkpoints" / step_dir(2));
  BOOST_TEST(worst_difference(w.model, a.model, 0) == 0.0);
}

// train.trace: one process per rank in trace.json, each with forward and backward spans of every
// microbatch, the waits for transfers, and its schedule; a "trace" record in metrics.jsonl.
BOOST_AUTO_TEST_CASE(the_trace_shows_every_stage) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  train(corpus, root / "traced", 2,
        kModel + kUntied + kSchedules + pipeline(2) + " --set train.trace.steps=2");
  const auto trace = boost::json::parse(read_text(root / "traced" / "trace.json")).as_object();
  int forward[2] = {0, 0}, backward[2] = {0, 0}, schedules[2] = {0, 0}, waits = 0;
  for (const auto& event : trace.at("traceEvents").as_array()) {
    const auto& e = event.as_object();
    if (e.at("ph") != "X") continue;
    const auto pid = e.at("pid").as_int64();
    BOOST_TEST_REQUIRE((pid == 0 || pid == 1));
    const std::string category(e.at("cat").as_string());
    if (category == "forward") ++forward[pid];
    if (category == "backward") ++backward[pid];
    if (category == "comm") ++waits;
    if (e.at("name") == "pipeline schedule") ++schedules[pid];
    BOOST_TEST(e.at("dur").to_number<double>() >= 0.0);
  }
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST(schedules[r] == 2);        // two traced steps
    BOOST_TEST(forward[r] >= 2 * 4 * 2);  // 2 steps x 4 microbatches x at least 2 units
    BOOST_TEST(backward[r] == forward[r]);
  }
  BOOST_TEST(waits > 0);
  const auto traced = records(root / "traced" / "metrics.jsonl", "trace");
  BOOST_TEST_REQUIRE(traced.size() == 1u);
  BOOST_TEST(traced[0].at("first_step").as_int64() == 2);
  BOOST_TEST(traced[0].at("last_step").as_int64() == 3);
}

// Every refusal names what does not fit.
BOOST_AUTO_TEST_CASE(misfits_are_refused_by_name) {
  Corpus corpus;
  const fs::path root = corpus.dir.path();
  // 3 layers do not split over 2 stages.
  std::string out =
      refused(corpus, root / "layers", 2, kSchedules + pipeline(2) + " --set model.num_layers=3");
  BOOST_TEST(out.find("distributed.pipeline") != std::string::npos, out);
  BOOST_TEST(out.find("3") != std::string::npos, out);
  // The interleaved schedule needs at least pp microbatches per group.
  out = refused(corpus, root / "microbatches", 2,
                kModel + kSchedules + pipeline(2, "interleaved_1f1b") +
                    " --set distributed.pipeline.virtual_stages=2 --set train.microbatches=1");
  BOOST_TEST(out.find("microbatch") != std::string::npos, out);
  // '|' segments that pp does not divide.
  out = refused(corpus, root / "segments", 2,
                R"( --set 'plugins.load=["pipeline_schedules","transformer","hybrid_stack"]')" + pipeline(2) +
                    " --set 'model.pattern=*-|*-|*-' --set model.num_layers=6");
  BOOST_TEST(out.find("does not divide the 3 segments") != std::string::npos, out);
  // A layer group is never cut by a stage boundary.
  out = refused(corpus, root / "group", 2,
                R"( --set 'plugins.load=["pipeline_schedules","transformer","hybrid_stack"]')" + pipeline(2) +
                    " --set 'model.pattern=*-[*|-]' --set model.num_layers=4");
  BOOST_TEST(out.find("group") != std::string::npos, out);
  // A scheduler without pipeline support is refused at pp > 1.
  out = refused(corpus, root / "sequential", 2, kModel + pipeline(2, "sequential"));
  BOOST_TEST(out.find("sequential") != std::string::npos, out);
}

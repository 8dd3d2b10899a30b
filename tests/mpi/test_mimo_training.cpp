// MIMO training across real processes under mpirun, against one process: the vision encoder and
// the language model of configs/mimo_digits.json on ranks of their own (non-colocated: one to
// one, fan-in from 2 encoder lanes to 1 language lane, fan-out from 1 to 2), on the same ranks
// (colocated, 2 lanes each, and fan-out from an encoder over 2 tensor-parallel ranks), and with
// the language model over 2 tensor-parallel ranks, pipelined (the language model over 2 stages,
// both modules over 2 stages, Megatron's 8-rank hetero layout with tp 2 x pp 2), and sharded by a
// data-parallel strategy per module (ZeRO-3 colocated; ZeRO-2 with pipelining), and an MoE
// language model's experts over ep 2, give the
// one-process run's losses and weights over 20 steps within 1e-6 and its Adam moments within 2e-6
// (float32 sums in another order; a mis-scaled or misrouted gradient differs by percents); a run
// stopped colocated resumes non-colocated; layouts the trainer cannot run are refused by name.
#define BOOST_TEST_MODULE mimo_training_ranks
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "digits_data.hpp"
#include "run_comparison.hpp"
#include "skip_module.hpp"
#include "temp_dir.hpp"
#include "train_corpus.hpp"

namespace fs = std::filesystem;
using namespace plexus::test;

PLEXUS_SKIP_MODULE_UNLESS(
    digits_csv().has_value() && have_mpirun() && comm_mpi_built(),
    "needs scikit-learn's digits.csv.gz (scripts/fetch-digits.sh build/data), mpirun and "
    "the comm_mpi plugin")

namespace {

constexpr double kTolerance = 1e-6;
// Adam's second moment holds squared gradients: a relative difference e in a gradient is 2e in it.
constexpr double kMomentTolerance = 2e-6;
// Adam with eps 1 (and a learning rate to match): with eps 1e-8 an element whose gradient is
// float32 noise gets a full-size update of either sign, so two correct runs that add in another
// order drift apart by the learning rate; with eps 1 an update is proportional to its gradient
// and noise stays noise, while a gradient scaled or routed wrongly still differs by percents.
const std::string kTwenty =
    "--set train.steps=20 --set train.eval_interval=0 --set optimizer.adam_eps=1 --set optimizer.lr=0.2 ";

const std::string kEightByFour = "--set train.micro_batch_size=8 --set train.microbatches=4";

// A mimo topology of `modules`, each {"name": ..., ...} in JSON.
std::string topology(const std::string& modules) {
  return "--set " + quote("distributed.topology={\"component\": \"mimo\", \"options\": {\"modules\": [" +
                          modules + "]}}");
}

struct Runs {
  TempDir dir;
  fs::path prefix = digits_dataset(dir.path());
  // One process; global microbatches of 32 and 64 samples; and 32 with the vocabulary padded to
  // 20 rows, as two tensor-parallel ranks pad it (make_vocab_size_divisible_by 2 x tp 2).
  fs::path ref32 = dir.path() / "ref32", ref64 = dir.path() / "ref64",
           ref32_padded = dir.path() / "ref32_padded";
  // 4 microbatches of 8 samples, which a pipeline keeps in flight together; and so padded.
  fs::path ref8x4 = dir.path() / "ref8x4", ref8x4_padded = dir.path() / "ref8x4_padded",
           ref16x4 = dir.path() / "ref16x4";
  Runs() {
    train(ref32, 1, "--set train.micro_batch_size=32");
    train(ref64, 1, "--set train.micro_batch_size=64");
    train(ref32_padded, 1, "--set train.micro_batch_size=32 --set model.make_vocab_size_divisible_by=4");
    train(ref8x4, 1, kEightByFour);
    train(ref8x4_padded, 1, kEightByFour + " --set model.make_vocab_size_divisible_by=4");
    train(ref16x4, 1, "--set train.micro_batch_size=16 --set train.microbatches=4");
  }
  void train(const fs::path& out, int ranks, const std::string& extra) const {
    const std::string command = mimo_train_command(prefix, out, kTwenty + extra);
    const auto run = run_process(kOneThread + (ranks > 1 ? mpirun_command(ranks, 180) : "") + command);
    BOOST_TEST_REQUIRE(run.status == 0, out.filename() << ":\n" << run.output);
  }
  std::string refused(const fs::path& out, int ranks, const std::string& extra) const {
    const auto run = run_process(kOneThread + mpirun_command(ranks, 120) +
                                 mimo_train_command(prefix, out, kTwenty + extra));
    BOOST_TEST(run.status != 0, out.filename() << " was expected to fail");
    return run.output;
  }
};
Runs& runs() {
  static Runs r;
  return r;
}

void expect_same(const fs::path& reference, const fs::path& run) {
  // The start record counts each module's parameters in all, whichever ranks hold them.
  const auto modules = [](const fs::path& dir) {
    return records(dir / "metrics.jsonl", "start").at(0).at("modules").as_array();
  };
  const auto ours = modules(run), theirs = modules(reference);
  BOOST_TEST_REQUIRE(ours.size() == theirs.size());
  for (std::size_t m = 0; m < ours.size(); ++m)
    BOOST_TEST(ours[m].at("parameters") == theirs[m].at("parameters"), boost::json::serialize(ours[m]));
  const RunDifference d = compare_runs(reference, run, 20);
  BOOST_TEST(d.losses <= kTolerance);
  BOOST_TEST(d.weights <= kTolerance);
  BOOST_TEST(d.moments <= kMomentTolerance);
}

}  // namespace

// images on rank 0, language on rank 1: the encoder's outputs cross the bridge and come back.
BOOST_AUTO_TEST_CASE(non_colocated_one_to_one) {
  const fs::path out = runs().dir.path() / "one_to_one";
  runs().train(out, 2, "--set train.micro_batch_size=32 " + mimo_topology(1, 0, 1, 1));
  expect_same(runs().ref32, out);
}

// images on ranks 0 and 1 (16 samples each), language on rank 2 (32): the language lane joins
// two encoder lanes' outputs, and the encoder's gradients are scaled by its dp over the
// language's (2 / 1) so that its lane average is the one loss's gradient.
BOOST_AUTO_TEST_CASE(non_colocated_fan_in) {
  const fs::path out = runs().dir.path() / "fan_in";
  runs().train(out, 3, "--set train.micro_batch_size=32 " + mimo_topology(2, 0, 1, 2));
  expect_same(runs().ref32, out);
}

// images on rank 0 (64 samples), language on ranks 1 and 2 (32 each).
BOOST_AUTO_TEST_CASE(non_colocated_fan_out) {
  const fs::path out = runs().dir.path() / "fan_out";
  runs().train(out, 3, "--set train.micro_batch_size=32 " + mimo_topology(1, 0, 2, 1));
  expect_same(runs().ref64, out);
}

// Both modules on ranks 0 and 1, 2 lanes each: the bridge is a copy on each rank.
BOOST_AUTO_TEST_CASE(colocated) {
  const fs::path out = runs().dir.path() / "colocated";
  runs().train(out, 2, "--set train.micro_batch_size=32 " + mimo_topology(2, 0, 2, 0));
  expect_same(runs().ref64, out);
}

// The language model over 2 tensor-parallel ranks: the lane's leader (tp rank 0) receives the
// encoder's rows and broadcasts them over tp, and alone sends their gradients back. Colocated
// (images on ranks 0 and 1, 16 samples each, into the one language lane on both), and
// non-colocated (images on rank 0, the language model on ranks 1 and 2).
std::string language_tp2(int images, bool colocated) {
  return "--set train.micro_batch_size=32 --set model.make_vocab_size_divisible_by=2 --set " +
         quote(
             "distributed.topology={\"component\": \"mimo\", \"options\": {\"modules\": [{\"name\": "
             "\"images\", "
             "\"num_ranks\": " +
             std::to_string(images) +
             "}, {\"name\": \"language\", \"num_ranks\": 2, \"tp\": 2, \"rank_offset\": " +
             std::to_string(colocated ? 0 : images) + "}]}}");
}

BOOST_AUTO_TEST_CASE(language_model_tensor_parallel) {
  const fs::path colocated = runs().dir.path() / "tp_colocated", apart = runs().dir.path() / "tp_apart";
  runs().train(colocated, 2, language_tp2(2, true));
  expect_same(runs().ref32_padded, colocated);
  runs().train(apart, 3, language_tp2(1, false));
  expect_same(runs().ref32_padded, apart);
}

// Colocated fan-out: the encoder over 2 tensor-parallel ranks (one lane of 64 samples; its vision
// layers whole on both, its transformer layers split), the language model 2 lanes of 32 on the
// same ranks. The encoder's last tp rank sends, and broadcasts the gradients it gets back.
BOOST_AUTO_TEST_CASE(colocated_fan_out_encoder_tensor_parallel) {
  const fs::path out = runs().dir.path() / "tp_fan_out";
  runs().train(
      out, 2,
      "--set train.micro_batch_size=32 --set " +
          quote("distributed.topology={\"component\": \"mimo\", \"options\": {\"modules\": [{\"name\": "
                "\"images\", \"num_ranks\": 2, \"tp\": 2}, {\"name\": \"language\", \"num_ranks\": 2}]}}"));
  expect_same(runs().ref64, out);
}

// Stopped at step 10 colocated on 2 ranks, resumed non-colocated on 3 (fan-out): the checkpoint
// names every tensor by its module, not by the layout that wrote it.
BOOST_AUTO_TEST_CASE(resumes_on_another_layout) {
  const fs::path out = runs().dir.path() / "relayout";
  runs().train(out, 2,
               "--set train.micro_batch_size=32 --set train.exit_interval=10 " + mimo_topology(2, 0, 2, 0));
  runs().train(out, 3, "--set train.micro_batch_size=32 --resume latest " + mimo_topology(1, 0, 2, 1));
  expect_same(runs().ref64, out);
}

// Pipeline parallelism inside a module, non-colocated, 4 microbatches in flight (Megatron's
// multi-module 1F1B): the encoder's last stage sends over the bridge, the language model's first
// stage splices and its last computes the loss; the language model's tied embedding lives on its
// first and last stages, which sum its gradient (the embedding group).
// images on rank 0, the language model's 2 stages on ranks 1 and 2 (one decoder layer each).
BOOST_AUTO_TEST_CASE(language_model_pipeline) {
  const fs::path out = runs().dir.path() / "pp_language";
  runs().train(out, 3,
               kEightByFour + " " +
                   topology("{\"name\": \"images\", \"num_ranks\": 1}, {\"name\": \"language\", "
                            "\"num_ranks\": 2, \"pp\": 2, \"rank_offset\": 1}"));
  expect_same(runs().ref8x4, out);
}

// Both modules of 2 stages: images on ranks 0 (patch embedding, a layer) and 1 (a layer, the
// projection), the language model on ranks 2 and 3.
BOOST_AUTO_TEST_CASE(both_modules_pipelined) {
  const fs::path out = runs().dir.path() / "pp_both";
  runs().train(out, 4,
               kEightByFour + " " +
                   topology("{\"name\": \"images\", \"num_ranks\": 2, \"pp\": 2}, {\"name\": "
                            "\"language\", \"num_ranks\": 2, \"pp\": 2, \"rank_offset\": 2}"));
  expect_same(runs().ref8x4, out);
}

// Megatron's hetero topology test layout, trained: images on ranks 0-3 (tp 2, dp 2), the language
// model on ranks 4-7 (tp 2, pp 2): the 2 encoder lanes' last tp ranks (1, 3) send to the language
// model's leader (rank 4: tp 0, first stage), which broadcasts over tp; the loss is on ranks 6, 7.
BOOST_AUTO_TEST_CASE(megatron_hetero_layout) {
  const fs::path out = runs().dir.path() / "pp_hetero";
  runs().train(out, 8,
               kEightByFour + " --set model.make_vocab_size_divisible_by=2 " +
                   topology("{\"name\": \"images\", \"num_ranks\": 4, \"tp\": 2}, {\"name\": "
                            "\"language\", \"num_ranks\": 4, \"tp\": 2, \"pp\": 2, \"rank_offset\": 4}"));
  expect_same(runs().ref8x4_padded, out);
}

// Stopped at step 10 with both modules pipelined (each stage's tensors sent to the writer, a tied
// copy once), resumed in one process.
BOOST_AUTO_TEST_CASE(pipelined_checkpoint_resumes_in_one_process) {
  const fs::path out = runs().dir.path() / "pp_resume";
  runs().train(out, 4,
               kEightByFour + " --set train.exit_interval=10 " +
                   topology("{\"name\": \"images\", \"num_ranks\": 2, \"pp\": 2}, {\"name\": "
                            "\"language\", \"num_ranks\": 2, \"pp\": 2, \"rank_offset\": 2}"));
  runs().train(out, 1, kEightByFour + " --resume latest");
  expect_same(runs().ref8x4, out);
}

// Each module's parameters held by the data-parallel strategy of distributed.data_parallel over
// its own dp group (Megatron's MIMO runs a distributed optimizer per module): colocated, 2 lanes
// of each module under ZeRO-3 (the values gathered unit by unit in the forward, over images/dp
// and language/dp in turn).
BOOST_AUTO_TEST_CASE(sharded_data_parallel_per_module) {
  const fs::path out = runs().dir.path() / "zero3_colocated";
  runs().train(
      out, 2,
      "--set train.micro_batch_size=32 --set distributed.data_parallel.options.strategy=optim_grads_params " +
          mimo_topology(2, 0, 2, 0));
  expect_same(runs().ref64, out);
  // Rank 0 holds a lane of both modules, each under the strategy.
  const boost::json::object start = records(out / "metrics.jsonl", "start").at(0);
  for (const boost::json::value& module : start.at("modules").as_array()) {
    const auto& dp = module.at("data_parallel").as_object();
    BOOST_TEST(dp.at("component") == "fsdp", boost::json::serialize(module));
    BOOST_TEST(dp.at("options").at("strategy") == "optim_grads_params", boost::json::serialize(module));
  }
}

// Everything at once on 6 ranks: images over 2 lanes (ranks 0, 1; fan-in), the language model
// over 2 stages x 2 lanes (ranks 2-5) under ZeRO-2, 4 microbatches of 16 in flight; the tied
// embedding's stages sum its reduced gradient shard by shard.
BOOST_AUTO_TEST_CASE(pipelined_and_sharded) {
  const fs::path out = runs().dir.path() / "pp_zero2";
  runs().train(out, 6,
               "--set train.micro_batch_size=8 --set train.microbatches=4 --set "
               "distributed.data_parallel.options.strategy=optim_grads " +
                   topology("{\"name\": \"images\", \"num_ranks\": 2}, {\"name\": \"language\", "
                            "\"num_ranks\": 4, \"pp\": 2, \"rank_offset\": 2}"));
  expect_same(runs().ref16x4, out);
}

// train.trace of a pipelined MIMO run: a process per rank, each with its module's forward and
// backward spans of every microbatch and its schedule; the bridge's waits on both sides; 1F1B's
// warm-up on the encoder (place 0 of 3 stages: microbatches 0 and 1 forward, then 2, before the
// first backward); a "trace" record and the pipeline's stages in the start record.
BOOST_AUTO_TEST_CASE(the_trace_shows_the_modules_pipeline) {
  const fs::path out = runs().dir.path() / "pp_traced";
  runs().train(out, 3,
               kEightByFour + " --set train.trace.steps=2 " +
                   topology("{\"name\": \"images\", \"num_ranks\": 1}, {\"name\": \"language\", "
                            "\"num_ranks\": 2, \"pp\": 2, \"rank_offset\": 1}"));
  std::ifstream file(out / "trace.json");
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto trace = boost::json::parse(text).as_object();
  int forward[3] = {0, 0, 0}, backward[3] = {0, 0, 0}, schedules[3] = {0, 0, 0};
  int rows_waits = 0, gradient_waits = 0;
  std::set<int64_t> forwards_before_backward;  // rank 0's, in its first traced step
  bool backward_seen = false;
  std::vector<boost::json::object> spans;
  for (const auto& event : trace.at("traceEvents").as_array())
    if (event.as_object().at("ph") == "X") spans.push_back(event.as_object());
  std::stable_sort(spans.begin(), spans.end(),
                   [](const boost::json::object& a, const boost::json::object& b) {
                     return a.at("ts").to_number<double>() < b.at("ts").to_number<double>();
                   });
  for (const auto& e : spans) {
    const auto pid = e.at("pid").as_int64();
    BOOST_TEST_REQUIRE((pid >= 0 && pid < 3));
    const std::string category(e.at("cat").as_string()), name(e.at("name").as_string());
    if (category == "forward") ++forward[pid];
    if (category == "backward") ++backward[pid];
    if (name == "pipeline schedule") ++schedules[pid];
    if (name == "wait: images rows") rows_waits += pid == 1 ? 1 : 100;
    if (name == "wait: rows' gradient") gradient_waits += pid == 0 ? 1 : 100;
    if (pid == 0 && category == "backward") backward_seen = true;
    if (pid == 0 && category == "forward" && !backward_seen)
      forwards_before_backward.insert(e.at("args").at("microbatch").as_int64());
  }
  for (int r = 0; r < 3; ++r) {
    BOOST_TEST(schedules[r] == 2, "rank " << r);  // two traced steps
    BOOST_TEST(forward[r] >= 2 * 4, "rank " << r);
    BOOST_TEST(backward[r] == forward[r], "rank " << r);
  }
  BOOST_TEST(rows_waits == 2 * 4);      // the language model's first stage, per microbatch
  BOOST_TEST(gradient_waits == 2 * 4);  // the encoder, per microbatch
  BOOST_TEST((forwards_before_backward == std::set<int64_t>{0, 1, 2}));
  BOOST_TEST(records(out / "metrics.jsonl", "trace").size() == 1u);
  const auto start = records(out / "metrics.jsonl", "start").at(0);
  BOOST_TEST(start.at("pipeline").at("stages") == 3);
  BOOST_TEST(start.at("pipeline").at("microbatches") == 4);
}

// A mixture-of-experts language model (Megatron's MIMO example is an MoE VLM) with its 4 experts
// divided over ep 2: the language lanes' tokens cross the module's ep group (language/ep) to the
// experts' ranks and back, the experts' gradients are their own (expert_dp of 1), the norm sums
// them over ep, and the checkpoint gathers every expert under its global name. images on rank 0
// (64 samples), the language model on ranks 1 and 2 (32 each), against one process running the
// same 2 microbatches of 32 (the router's balancing loss is per microbatch).
const std::string kMoe =
    " --set model.moe.layer_freq=1 --set "
    "'model.moe.options={\"num_moe_experts\": 4, \"moe_router_topk\": 2, \"moe_aux_loss_coeff\": 0.01}'";

BOOST_AUTO_TEST_CASE(mixture_of_experts_language_model_expert_parallel) {
  const fs::path reference = runs().dir.path() / "moe_ref", out = runs().dir.path() / "moe_ep2";
  runs().train(reference, 1, "--set train.micro_batch_size=32 --set train.microbatches=2" + kMoe);
  runs().train(out, 3,
               "--set train.micro_batch_size=32 --set train.exit_interval=10" + kMoe + " " +
                   topology("{\"name\": \"images\", \"num_ranks\": 1}, {\"name\": \"language\", "
                            "\"num_ranks\": 2, \"ep\": 2, \"rank_offset\": 1}"));
  // Stopped at step 10 and resumed in one process: every expert is in the checkpoint.
  runs().train(out, 1, "--set train.micro_batch_size=32 --set train.microbatches=2 --resume latest" + kMoe);
  expect_same(reference, out);
}

BOOST_AUTO_TEST_CASE(layouts_it_cannot_run_are_refused_by_name) {
  const fs::path out = runs().dir.path() / "refused";
  const std::string grid = runs().refused(out, 2, "");
  BOOST_TEST(
      grid.find("distributed.topology.component: a MIMO model (mimo.modules) on 2 ranks needs the \"mimo\" "
                "topology") != std::string::npos,
      grid);
  const std::string names = runs().refused(
      out, 2,
      "--set " +
          quote("distributed.topology={\"component\": \"mimo\", \"options\": {\"modules\": [{\"name\": "
                "\"audio\", \"num_ranks\": 1}, {\"name\": \"language\", \"num_ranks\": 1, \"rank_offset\": "
                "1}]}}"));
  BOOST_TEST(names.find("missing: images; not in mimo.modules: audio") != std::string::npos, names);
  const std::string cp = runs().refused(
      out, 2,
      "--set " +
          quote("distributed.topology={\"component\": \"mimo\", \"options\": {\"modules\": [{\"name\": "
                "\"images\", \"num_ranks\": 2}, {\"name\": \"language\", \"num_ranks\": 2, \"cp\": 2}]}}"));
  BOOST_TEST(cp.find("module language has cp 2: MIMO modules are trained with data, tensor, pipeline and "
                     "expert parallelism") != std::string::npos,
             cp);
  const std::string colocated = runs().refused(
      out, 2,
      topology("{\"name\": \"images\", \"num_ranks\": 2}, {\"name\": \"language\", \"num_ranks\": 2, "
               "\"pp\": 2}"));
  BOOST_TEST(
      colocated.find("module language has pp 2, but it shares its ranks with another module "
                     "(colocated): colocated modules run one pipeline stage each") != std::string::npos,
      colocated);

  const std::string layers = runs().refused(
      out, 4,
      topology("{\"name\": \"images\", \"num_ranks\": 1}, {\"name\": \"language\", \"num_ranks\": 3, "
               "\"pp\": 3, \"rank_offset\": 1}"));
  BOOST_TEST(layers.find("module language (pp 3): pp = 3 does not divide the decoder's 2 logical layers") !=
                 std::string::npos,
             layers);
  const std::string encoder_sp = runs().refused(
      out, 2,
      "--set mimo.modules[0].model.sequence_parallel=true " +
          topology("{\"name\": \"images\", \"num_ranks\": 2, \"tp\": 2}, {\"name\": \"language\", "
                   "\"num_ranks\": 2}"));
  BOOST_TEST(
      encoder_sp.find("mimo.modules[0].model.sequence_parallel: sequence parallelism is not built for a "
                      "MIMO encoder") != std::string::npos,
      encoder_sp);

  const std::string uneven =
      runs().refused(out, 3, "--set train.micro_batch_size=1 " + mimo_topology(2, 0, 1, 2));
  BOOST_TEST(uneven.find("train.micro_batch_size") != std::string::npos, uneven);
}

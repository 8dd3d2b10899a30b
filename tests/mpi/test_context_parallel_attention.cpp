// The context-parallel attention core against whole attention, in float64, through real
// processes: ctest starts this executable as the launcher, which runs transformer.attention on
// whole sequences (no cp group in its process) and writes its output and gradients, then runs
// itself under `mpirun -np c` (c = 2 and 4) with the topology's cp = c. Each rank builds the same
// layer with the same whole parameters, takes its two chunks of every sequence (chunks r and
// 2c - 1 - r of 2c) of the input and of the output gradient, runs forward and backward with the
// keys and values passed around the p2p ring and, again, gathered (model.cp_comm_type), and
// checks:
//   - its output and input gradient against its chunks of the whole layer's;
//   - the parameters' gradients summed over the cp ranks (what the data-parallel reduction over
//     dp x cp does) against the whole layer's.
// MHA and GQA, with RoPE. Every case of the balanced layout's causal blocks occurs: a rank's
// own block (diagonal chunks), blocks of lower ranks (its first chunk sees their first chunk
// whole, its second chunk both), and blocks of higher ranks (only its second chunk sees them).
// Tolerance 1e-12 of each tensor's largest element: float64 with only the order of sums changed.
// Bidirectional attention (option attn_mask_type "no_mask") is refused on every rank, naming the
// option: the context-parallel core is causal only.
#define BOOST_TEST_MODULE context_parallel_attention
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../unit/test_transformer_support.hpp"
#include "comm_harness.hpp"
#include "per_process.hpp"
#include "plexus/core/distributed/runtime.hpp"
#include "plexus/core/run_config.hpp"
#include "skip_module.hpp"
#include "temp_dir.hpp"

namespace utf = boost::unit_test;
using plexus::test::under_mpirun;
using tt::Tensor;

PLEXUS_SKIP_MODULE_UNLESS(std::filesystem::exists(plexus::test::plugin_file("comm_mpi")) &&
                              (under_mpirun() || plexus::test::have_mpirun()),
                          "needs the comm_mpi plugin (a build with MPI) and mpirun")

namespace {

constexpr double kTolerance = 1e-12;
constexpr int64_t kBatch = 2, kSeq = 16, kHidden = 16;
const DLDataType kF64 = plx_dtype_f64();

struct Case {
  const char* name;
  int64_t groups;
};
const Case kCases[] = {{"mha", 4}, {"gqa", 2}};

boost::json::object model_section(const Case& c, const char* comm_type) {
  tt::Model m;
  m.vocab_size = 16;
  m.hidden_size = kHidden;
  m.num_attention_heads = 4;
  m.num_query_groups = c.groups;
  m.ffn_hidden_size = 8;
  m.seq_length = kSeq;
  boost::json::object o = m.json();
  o["cp_comm_type"] = comm_type;
  return o;
}

uint64_t seed_of(const Case& c, uint64_t what) {
  uint64_t h = 1469598103934665603ull;
  for (const char ch : std::string(c.name)) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h + what;
}

struct Called {
  Tensor output, input_grad;
  std::vector<Tensor> param_grads;
};

// One training forward and backward of the layer with the case's whole parameters.
Called call(const Case& c, const char* comm_type, Tensor x, Tensor dy) {
  const tt::ComponentLayer layer(tt::component("transformer.attention"), {}, "model.layer.options",
                                 model_section(c, comm_type), 2, DLDevice{kDLCPU, 0});
  std::vector<Tensor> params;
  for (uint32_t i = 0; i < layer->info().num_params; ++i) {
    const plx_param_spec spec = layer->param(i);
    std::mt19937_64 rng(seed_of(c, i));
    params.push_back(tt::random_tensor(std::vector<int64_t>(spec.desc.dims, spec.desc.dims + spec.desc.ndim),
                                       kF64, rng, 0.5));
  }
  tt::Run run(*layer, {std::move(x)}, std::move(params), kF64);
  Called called;
  called.output = run.forward()[0];
  std::vector<Tensor> grad_inputs{Tensor(run.inputs[0].shape, kF64)};
  for (const Tensor& p : run.params) called.param_grads.push_back(Tensor(p.shape, kF64));
  std::vector<Tensor> grad_outputs{std::move(dy)};
  run.backward(grad_outputs, grad_inputs, called.param_grads);
  called.input_grad = grad_inputs[0];
  return called;
}

struct Data {
  Tensor x, dy;
};
Data make_data(const Case& c) {
  std::mt19937_64 rng(seed_of(c, 1000));
  return {tt::random_tensor({kBatch, kSeq, kHidden}, kF64, rng),
          tt::random_tensor({kBatch, kSeq, kHidden}, kF64, rng)};
}

// Rank r's chunks r and 2c - 1 - r of each sequence of a [batch, seq, hidden] tensor's values.
std::vector<double> chunks_of(const std::vector<double>& whole, int rank, int ranks) {
  const int64_t chunk = kSeq / (2 * ranks);
  std::vector<double> out;
  for (int64_t b = 0; b < kBatch; ++b)
    for (const int64_t which : {int64_t{rank}, int64_t{2 * ranks - 1 - rank}}) {
      const auto first = whole.begin() + (b * kSeq + which * chunk) * kHidden;
      out.insert(out.end(), first, first + chunk * kHidden);
    }
  return out;
}

Tensor local(const Tensor& whole, int rank, int ranks) {
  Tensor t({kBatch, kSeq / ranks, kHidden}, kF64);
  t.f64 = chunks_of(whole.f64, rank, ranks);
  return t;
}

std::filesystem::path reference_file(const std::filesystem::path& dir, const Case& c) {
  return dir / (std::string(c.name) + ".f64");
}

void expect_close(const std::vector<double>& got, const std::vector<double>& expected,
                  const std::string& what) {
  BOOST_TEST_REQUIRE(got.size() == expected.size(), what);
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::abs(expected[i]));
    worst = std::max(worst, std::abs(got[i] - expected[i]));
  }
  BOOST_TEST(worst <= kTolerance * std::max(scale, 1e-30),
             what << ": worst difference " << worst << " of " << scale);
}

struct Started {
  plexus::PluginHost host;
  std::unique_ptr<plexus::distributed::Runtime> runtime;
  Started() {
    const int world = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
    runtime = plexus::distributed::Runtime::start(
        host,
        plexus::load_run_config(std::nullopt,
                                {"distributed.timeout_s=30",
                                 "distributed.topology.options={\"cp\": " + std::to_string(world) + "}"}),
        {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false},
        plexus::distributed::LaunchEnv::from_process());
  }
};
using StopAtTheEnd = plexus::test::DestroyAtTheEnd<Started>;
BOOST_TEST_GLOBAL_FIXTURE(StopAtTheEnd);

void check_case(const Case& c, const char* comm_type, const std::filesystem::path& dir) {
  plexus::distributed::Runtime& runtime = *plexus::test::per_process<Started>().runtime;
  const int32_t rank = runtime.rank(), ranks = runtime.world_size();
  BOOST_TEST_CONTEXT(c.name << " by " << comm_type << " at cp " << ranks << ", rank " << rank) {
    const Data d = make_data(c);
    Called called = call(c, comm_type, local(d.x, rank, ranks), local(d.dy, rank, ranks));
    std::ifstream reference(reference_file(dir, c), std::ios::binary);
    BOOST_TEST_REQUIRE(reference.good());
    const auto read = [&](std::size_t count) {
      std::vector<double> v(count);
      reference.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * 8));
      BOOST_TEST_REQUIRE(reference.good());
      return v;
    };
    const std::size_t tokens = kBatch * kSeq * kHidden;
    expect_close(called.output.f64, chunks_of(read(tokens), rank, ranks), "output");
    expect_close(called.input_grad.f64, chunks_of(read(tokens), rank, ranks), "input gradient");
    for (Tensor& g : called.param_grads) {
      runtime.group("cp")->all_reduce(g.view(), plexus::distributed::ReduceOp::sum);
      expect_close(g.f64, read(g.f64.size()), "a parameter's gradient summed over cp");
    }
  }
}

utf::assertion_result in_ranks(utf::test_unit_id) {
  return utf::assertion_result(under_mpirun());
}
utf::assertion_result in_launcher(utf::test_unit_id) {
  return utf::assertion_result(!under_mpirun());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(launcher, *utf::precondition(in_launcher))

BOOST_AUTO_TEST_CASE(ring_and_gathered_attention_equal_whole_attention_at_cp_2_and_4) {
  const plexus::test::TempDir dir;
  for (const Case& c : kCases) {
    const Data d = make_data(c);
    const Called whole = call(c, "p2p", d.x, d.dy);
    std::ofstream out(reference_file(dir.path(), c), std::ios::binary);
    const auto write = [&](const Tensor& t) {
      out.write(reinterpret_cast<const char*>(t.f64.data()), static_cast<std::streamsize>(t.f64.size() * 8));
    };
    write(whole.output);
    write(whole.input_grad);
    for (const Tensor& g : whole.param_grads) write(g);
    BOOST_TEST_REQUIRE(out.good());
  }
  for (const int cp : {2, 4}) {
    const plexus::test::Job job = plexus::test::mpirun(cp, "--run_test=ranks --log_level=message",
                                                       "PLEXUS_CP_REFERENCE=" + dir.path().string());
    BOOST_TEST(job.status == 0, "mpirun -np " << cp << ":\n" << job.output);
    BOOST_TEST(plexus::test::count_of(job.output, "checked 4 cases") == static_cast<std::size_t>(cp),
               job.output);
    BOOST_TEST(
        plexus::test::count_of(job.output, "checked the no_mask refusal") == static_cast<std::size_t>(cp),
        job.output);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ranks, *utf::precondition(in_ranks))

BOOST_AUTO_TEST_CASE(every_case) {
  const char* dir = std::getenv("PLEXUS_CP_REFERENCE");
  BOOST_TEST_REQUIRE(dir != nullptr, "PLEXUS_CP_REFERENCE names the launcher's reference directory");
  for (const Case& c : kCases)
    for (const char* comm_type : {"p2p", "all_gather"}) check_case(c, comm_type, dir);
  // The launcher counts this line on every rank: the checks ran.
  BOOST_TEST_MESSAGE("checked 4 cases");
}

BOOST_AUTO_TEST_CASE(no_mask_is_refused) {
  const int32_t ranks = plexus::test::per_process<Started>().runtime->world_size();
  const std::string e = tt::error_of([] {
    const tt::ComponentLayer layer(
        tt::component("transformer.attention"), boost::json::object{{"attn_mask_type", "no_mask"}},
        "model.attention.options", model_section(kCases[0], "p2p"), 2, DLDevice{kDLCPU, 0});
  });
  BOOST_TEST((tt::mentions(e, "attn_mask_type \"no_mask\"") &&
              tt::mentions(e, "the cp group has " + std::to_string(ranks) + " ranks")),
             e);
  // The launcher counts this line on every rank: the check ran.
  BOOST_TEST_MESSAGE("checked the no_mask refusal");
}

BOOST_AUTO_TEST_SUITE_END()

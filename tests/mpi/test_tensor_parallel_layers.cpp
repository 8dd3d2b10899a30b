// Each tensor-parallel layer of the transformer plugin against the whole layer, in float64,
// through real processes: ctest starts this executable as the launcher, which computes every
// case with the whole layer (no tp group in its process), writes the outputs and gradients to a
// directory, and runs itself under `mpirun -np t` (t = 2 and 4) with the topology's tp = t. Each
// rank builds the same layer, now split, gives it its shard of the same whole parameters (the
// slices the host would keep, from the spec's tp fields) and the same inputs (under sequence
// parallelism its block of the tokens), and checks against the whole layer's results:
//   - outputs and input gradients: the whole tensors (or, under sequence parallelism, this rank's
//     block of them; the head's logits: this rank's columns of the padded vocabulary);
//   - parameter gradients: this rank's slice of the whole gradient for a split parameter, the
//     whole gradient for a whole one, and for one marked PLX_PARAM_SEQUENCE_PARALLEL the sum of
//     the ranks' parts (what the host sums over tp).
// Tolerance 1e-12 of each tensor's largest element: float64 with only the order of sums changed
// (t partial products added by the all-reduce, the loss's exponentials summed per rank first).
#define BOOST_TEST_MODULE tensor_parallel_layers
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
#include "plexus/core/engine/parameters.hpp"
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
constexpr int64_t kBatch = 2, kSeq = 8;
const DLDataType kF64 = plx_dtype_f64();

struct Case {
  const char* name;
  const char* component;
  std::string activation = "gelu";
  std::string normalization = "RMSNorm";
  bool sequence_parallel = false;
  boost::json::object options = {};  // the component's own
};

// Every case at each tp: attention with grouped queries, the MLP with GeLU (LayerNorm: a partial
// bias too) and SwiGLU (fc1's two parts), the vocabulary-parallel embedding and head, and the
// Mamba-2 mixer (in_proj's five parts, the convolution's three; 4 heads in 4 groups); each with
// and without sequence parallelism. And the MoE layer under sequence parallelism (which it needs
// at tp > 1), its experts split over expert_tp = tp (SwiGLU: fc1's two parts), each rank's routed
// rows gathered over expert_tp and the partial outputs reduce-scattered back; 4 experts, top 2,
// a shared expert.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const bool sp : {false, true}) {
    out.push_back({"attention", "transformer.attention", "gelu", "RMSNorm", sp});
    out.push_back({"mlp_gelu", "transformer.mlp", "gelu", "LayerNorm", sp});
    out.push_back({"mlp_swiglu", "transformer.mlp", "swiglu", "RMSNorm", sp});
    out.push_back({"embedding", "transformer.embedding", "gelu", "RMSNorm", sp});
    out.push_back({"head", "transformer.lm_head", "gelu", "RMSNorm", sp});
    out.push_back(
        {"mamba",
         "mamba.mixer",
         "gelu",
         "RMSNorm",
         sp,
         {{"mamba_state_dim", 4}, {"mamba_head_dim", 8}, {"mamba_num_groups", 4}, {"chunk_size", 4}}});
  }
  out.push_back(
      {"moe",
       "moe.layer",
       "swiglu",
       "RMSNorm",
       true,
       {{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_shared_expert_intermediate_size", 8}}});
  return out;
}

std::string case_name(const Case& c) {
  return std::string(c.name) + (c.sequence_parallel ? "_sp" : "");
}

// The model section at tp = t: 16 hidden in 4 heads, query groups 2 (4 at t = 4, which must
// divide them), an MLP of 8, a vocabulary of 16 (which every t divides: no padding).
boost::json::object model_section(const Case& c, int tp) {
  tt::Model m;
  m.vocab_size = 16;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.num_query_groups = tp == 4 ? 4 : 2;
  m.ffn_hidden_size = 8;
  m.seq_length = kSeq;
  m.activation = c.activation;
  m.normalization = c.normalization;
  boost::json::object o = m.json();
  o["padded_vocab_size"] = m.vocab_size;
  o["sequence_parallel"] = c.sequence_parallel;
  return o;
}

// The plugins' components: the transformer's and, loaded beside them, the mamba and moe plugins'.
const plexus::Component& component(const std::string& name) {
  static const bool others = [] {
    tt::load_built_plugin(tt::host(), "mamba");
    tt::load_built_plugin(tt::host(), "moe");
    return true;
  }();
  (void)others;
  return tt::component(name);
}

bool is_embedding(const Case& c) {
  return std::string(c.name) == "embedding";
}
bool is_head(const Case& c) {
  return std::string(c.name) == "head";
}

uint64_t seed_of(const Case& c, uint64_t what) {
  uint64_t h = 1469598103934665603ull;
  for (const char ch : std::string(c.name)) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h + what;
}

// The whole inputs of a case: token ids for the embedding, hidden states and targets for the
// head, hidden states otherwise; and the whole output gradient (the head's: the loss's seed).
struct Data {
  Tensor x, targets, dy;
};

Data make_data(const Case& c) {
  std::mt19937_64 rng(seed_of(c, 1000));
  Data d;
  std::uniform_int_distribution<int32_t> token(0, 15);
  if (is_embedding(c)) {
    std::vector<int32_t> ids(kBatch * kSeq);
    for (int32_t& id : ids) id = token(rng);
    d.x = Tensor::ints({kBatch, kSeq}, ids);
  } else {
    d.x = tt::random_tensor({kBatch, kSeq, 16}, kF64, rng);
  }
  if (is_head(c)) {
    std::vector<int32_t> ids(kBatch * kSeq);
    for (int32_t& id : ids) id = token(rng);
    ids[3] = -1;  // an ignored target
    d.targets = Tensor::ints({kBatch, kSeq}, ids);
    d.dy = Tensor({1}, kF64);
    d.dy.f64[0] = 0.75;
  } else {
    d.dy = tt::random_tensor({kBatch, kSeq, 16}, kF64, rng);
  }
  return d;
}

// Parameter i's whole values (the same draw on every rank and in the launcher).
Tensor whole_param(const Case& c, uint32_t i, const std::vector<int64_t>& shape) {
  std::mt19937_64 rng(seed_of(c, i));
  return tt::random_tensor(shape, kF64, rng, 0.5);
}

// One training forward and backward of a layer: its outputs, the gradient of its first input (the
// hidden states; none for token ids) and of its parameters.
struct Called {
  std::vector<Tensor> outputs;
  Tensor input_grad;
  std::vector<Tensor> param_grads;
};

Called call(const plexus::LayerInstance& layer, const Case& c, Tensor x, const Tensor& dy,
            std::vector<Tensor> params) {
  const Data d = make_data(c);
  std::vector<Tensor> inputs{std::move(x)};
  if (is_head(c)) inputs.push_back(d.targets);
  tt::Run run(layer, inputs, std::move(params), kF64);
  Called called;
  called.outputs = run.forward();
  std::vector<Tensor> grad_outputs{dy};
  if (is_head(c)) {  // the loss's seed; the logits need no gradient
    grad_outputs.push_back(Tensor(called.outputs[1].shape, kF64));
    grad_outputs.back().null_data = true;
  }
  std::vector<Tensor> grad_inputs;
  for (const Tensor& in : run.inputs) {
    grad_inputs.push_back(Tensor(in.shape, kF64));
    grad_inputs.back().null_data = !in.is_float();
  }
  for (const Tensor& p : run.params) called.param_grads.push_back(Tensor(p.shape, kF64));
  run.backward(grad_outputs, grad_inputs, called.param_grads);
  called.input_grad = grad_inputs[0];
  return called;
}

// What a whole layer computes of a case: its outputs (loss and logits for the head), its input
// gradient (none for the embedding) and its parameter gradients, in that order.
std::vector<Tensor> whole_results(const Case& c, int tp) {
  const tt::ComponentLayer layer(component(c.component), c.options, "model.layer.options",
                                 model_section(c, tp), 2, DLDevice{kDLCPU, 0});
  const Data d = make_data(c);
  std::vector<Tensor> params;
  for (uint32_t i = 0; i < layer->info().num_params; ++i) {
    const plx_param_spec spec = layer->param(i);
    params.push_back(
        whole_param(c, i, std::vector<int64_t>(spec.desc.dims, spec.desc.dims + spec.desc.ndim)));
  }
  const Called called = call(*layer, c, d.x, d.dy, std::move(params));
  std::vector<Tensor> results = called.outputs;
  if (!is_embedding(c)) results.push_back(called.input_grad);
  for (const Tensor& g : called.param_grads) results.push_back(g);
  return results;
}

std::filesystem::path reference_file(const std::filesystem::path& dir, const Case& c, int tp) {
  return dir / (case_name(c) + "_tp" + std::to_string(tp) + ".f64");
}

void write_results(const std::filesystem::path& file, const std::vector<Tensor>& results) {
  std::ofstream out(file, std::ios::binary);
  for (const Tensor& t : results)
    out.write(reinterpret_cast<const char*>(t.f64.data()), static_cast<std::streamsize>(t.f64.size() * 8));
  BOOST_TEST_REQUIRE(out.good(), "cannot write " << file);
}

std::vector<double> read_doubles(std::ifstream& in, int64_t count) {
  std::vector<double> v(static_cast<std::size_t>(count));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * 8));
  BOOST_TEST_REQUIRE(in.good());
  return v;
}

// ---- one rank ----

struct Started {
  plexus::PluginHost host;
  std::unique_ptr<plexus::distributed::Runtime> runtime;
  Started() {
    const int world = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
    runtime = plexus::distributed::Runtime::start(
        host,
        plexus::load_run_config(std::nullopt,
                                {"distributed.timeout_s=30",
                                 "distributed.topology.options={\"tp\": " + std::to_string(world) + "}"}),
        {{std::string(PLEXUS_BUILD_DIR) + "/lib/plexus/plugins"}, false},
        plexus::distributed::LaunchEnv::from_process());
  }
};
using StopAtTheEnd = plexus::test::DestroyAtTheEnd<Started>;
BOOST_TEST_GLOBAL_FIXTURE(StopAtTheEnd);

// Rows [r n / t, (r + 1) n / t) of a tensor whose first two dimensions are [batch, seq]: this
// rank's block of the tokens, shaped [batch, seq / t, ...].
Tensor token_block(const Tensor& whole, int rank, int ranks) {
  Tensor block = whole;
  block.shape[1] /= ranks;
  const int64_t n = block.numel();
  std::vector<double> values = whole.values();
  block.resize();
  for (int64_t i = 0; i < n; ++i)
    block.set(static_cast<std::size_t>(i), values[static_cast<std::size_t>(rank * n + i)]);
  return block;
}

// A float32 tensor of `shape` holding each element's own index.
plexus::Tensor element_indices(const std::vector<int64_t>& shape) {
  plexus::Tensor t(shape, plx_dtype_f32());
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

// Rank `rank`'s slice of `whole` (values of the whole shape) by `split`, through the engine's own
// copy_shard on element indices (float32 holds every index of these small tensors exactly).
std::vector<double> slice(const std::vector<double>& whole, const std::vector<int64_t>& whole_shape,
                          const std::vector<int64_t>& shard_shape, const plexus::TensorSplit& split,
                          int32_t rank) {
  const plexus::Tensor indices = element_indices(whole_shape);
  plexus::Tensor shard(shard_shape, plx_dtype_f32());
  plexus::copy_shard(indices, split, rank, shard);
  std::vector<double> out(static_cast<std::size_t>(shard.numel()));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = whole[static_cast<std::size_t>(shard.data<float>()[i])];
  return out;
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

void check_case(const Case& c, const std::filesystem::path& dir) {
  plexus::distributed::Runtime& runtime = *plexus::test::per_process<Started>().runtime;
  const int32_t rank = runtime.rank(), ranks = runtime.world_size();
  const plexus::distributed::Communicator& tp = *runtime.group("tp");
  BOOST_TEST_CONTEXT(case_name(c) << " at tp " << ranks << ", rank " << rank) {
    const tt::ComponentLayer layer(component(c.component), c.options, "model.layer.options",
                                   model_section(c, ranks), 2, DLDevice{kDLCPU, 0});
    const Data d = make_data(c);
    const bool sp = c.sequence_parallel;
    // This rank's shards of the whole parameters.
    std::vector<plx_param_spec> specs;
    std::vector<plexus::TensorSplit> splits;
    std::vector<std::vector<int64_t>> whole_shapes;
    std::vector<Tensor> params;
    for (uint32_t i = 0; i < layer->info().num_params; ++i) {
      const plx_param_spec spec = layer->param(i);
      const std::vector<int64_t> shard_shape(spec.desc.dims, spec.desc.dims + spec.desc.ndim);
      specs.push_back(spec);
      splits.push_back(plexus::tensor_split_of(spec, rank, ranks, spec.name));
      whole_shapes.push_back(plexus::whole_shape(shard_shape, splits.back()));
      const Tensor whole = whole_param(c, i, whole_shapes.back());
      Tensor shard(shard_shape, kF64);
      shard.f64 = splits.back().split()
                      ? slice(whole.f64, whole_shapes.back(), shard_shape, splits.back(), rank)
                      : whole.f64;
      params.push_back(std::move(shard));
    }
    // Under sequence parallelism this rank's block of the hidden states and their gradient.
    const Called called = call(*layer, c, sp && !is_embedding(c) ? token_block(d.x, rank, ranks) : d.x,
                               sp && !is_head(c) ? token_block(d.dy, rank, ranks) : d.dy, std::move(params));
    const std::vector<Tensor>& out = called.outputs;
    const std::vector<Tensor>& grads = called.param_grads;

    std::ifstream reference(reference_file(dir, c, ranks), std::ios::binary);
    BOOST_TEST_REQUIRE(reference.good(), "no reference " << reference_file(dir, c, ranks));
    const int64_t tokens = kBatch * kSeq, hidden = 16, vocab = 16;
    // The block of this rank's tokens of a whole [batch, seq, hidden] tensor's values.
    const auto block = [&](std::vector<double> whole) {
      if (!sp) return whole;
      const auto n = static_cast<std::ptrdiff_t>(tokens / ranks * hidden);
      return std::vector<double>(whole.begin() + rank * n, whole.begin() + (rank + 1) * n);
    };
    if (is_head(c)) {
      expect_close(out[0].values(), read_doubles(reference, 1), "loss");
      const plexus::TensorSplit columns{2, {vocab}, rank, ranks};
      expect_close(
          out[1].values(),
          slice(read_doubles(reference, tokens * vocab), {kBatch, kSeq, vocab}, out[1].shape, columns, rank),
          "logits (this rank's columns)");
    } else {
      expect_close(out[0].values(), block(read_doubles(reference, tokens * hidden)), "output");
    }
    if (!is_embedding(c))
      expect_close(called.input_grad.values(), block(read_doubles(reference, tokens * hidden)),
                   "input gradient");
    for (std::size_t i = 0; i < grads.size(); ++i) {
      int64_t whole_numel = 1;
      for (const int64_t dim : whole_shapes[i]) whole_numel *= dim;
      const std::vector<double> whole = read_doubles(reference, whole_numel);
      std::vector<double> got = grads[i].values();
      if ((specs[i].flags & PLX_PARAM_SEQUENCE_PARALLEL) != 0) {
        BOOST_TEST(sp, specs[i].name << " is marked sequence-parallel without sequence parallelism");
        Tensor summed = grads[i];
        tp.all_reduce(summed.view(), plexus::distributed::ReduceOp::sum);
        got = summed.values();
      }
      const std::vector<double> expected =
          splits[i].split() ? slice(whole, whole_shapes[i], grads[i].shape, splits[i], rank) : whole;
      expect_close(got, expected, std::string("gradient of ") + specs[i].name);
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

BOOST_AUTO_TEST_CASE(split_layers_equal_the_whole_layer_at_tp_2_and_4) {
  const plexus::test::TempDir dir;
  for (const int tp : {2, 4}) {
    for (const Case& c : cases()) write_results(reference_file(dir.path(), c, tp), whole_results(c, tp));
    const plexus::test::Job job = plexus::test::mpirun(tp, "--run_test=ranks --log_level=message",
                                                       "PLEXUS_TP_REFERENCE=" + dir.path().string());
    BOOST_TEST(job.status == 0, "mpirun -np " << tp << ":\n" << job.output);
    BOOST_TEST(plexus::test::count_of(job.output, "checked " + std::to_string(cases().size()) + " cases") ==
                   static_cast<std::size_t>(tp),
               job.output);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ranks, *utf::precondition(in_ranks))

BOOST_AUTO_TEST_CASE(every_case) {
  const char* dir = std::getenv("PLEXUS_TP_REFERENCE");
  BOOST_TEST_REQUIRE(dir != nullptr, "PLEXUS_TP_REFERENCE names the launcher's reference directory");
  for (const Case& c : cases()) check_case(c, dir);
  // The launcher counts this line on every rank: the checks ran.
  BOOST_TEST_MESSAGE("checked " << cases().size() << " cases");
}

BOOST_AUTO_TEST_SUITE_END()

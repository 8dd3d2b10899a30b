// The layers' activation estimates (ABI 1.10, plx_layer_v1.estimate_activation_bytes) against
// what a training forward really leaves on the heap: the real plugins, dlopened; a layer's state
// created, one training forward run through every stage, and the bytes glibc has handed out
// (its main arena's and its mapped blocks') compared before and after. The forward's temporaries
// are freed by then and its outputs were allocated before, so what remains is the state.
//
// Tolerance: 0.1% of the estimate plus 2 KiB, for the allocator's headers and alignment (each
// buffer is 64-byte aligned; measured: 64 to 950 bytes over the estimates, for up to a dozen
// buffers). A layer that forgot a saved buffer, or counted a temporary, is off by a whole
// activation: a hidden-width one is 128 KiB at these sizes (512 tokens of 64 floats).
//
// The sizes keep every Mamba-2 buffer under 1 MiB: the mixer keeps larger ones in a cache shared
// by its calls, whose idle buffers a heap count cannot tell from held ones.
#define BOOST_TEST_MODULE activation_estimates
#include <malloc.h>

#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "test_mamba_support.hpp"
#include "test_moe_support.hpp"
#include "test_transformer_support.hpp"

namespace {

using tt::Tensor;

double heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks) + static_cast<double>(m.hblkhd);
}

struct Measured {
  double estimate = 0;
  double held = 0;
};

// The layer's estimate for these inputs at cp 1, and the heap its state holds after a training
// forward of them (a first forward and its state are dropped before: layer-owned tables made on
// first use are not the state's).
Measured measure(const plexus::LayerInstance& layer, std::vector<Tensor> inputs, std::vector<Tensor> params) {
  tt::Run run(layer, std::move(inputs), std::move(params), plx_dtype_f32());
  run.forward();
  run.state.reset();
  Measured m;
  const std::optional<double> estimate = layer.estimate_activation_bytes(tt::descs(run.inputs), 1);
  BOOST_TEST_REQUIRE(estimate.has_value());
  m.estimate = *estimate;
  std::vector<Tensor> outputs;
  for (const plx_tensor_desc& d : layer.output_desc(tt::descs(run.inputs)))
    outputs.push_back(Tensor::like_desc(d, plx_dtype_f32()));
  std::vector<DLTensor> in = tt::views(run.inputs), out = tt::views(outputs), par = tt::views(run.params);
  const plx_forward_args args = tt::forward_args(in, out, par, PLX_FORWARD_TRAINING);
  auto state = layer.create_state(0);
  const double before = heap_in_use();
  for (uint32_t stage = 0; stage < layer.info().num_stages; ++stage) layer.forward(*state, stage, args);
  m.held = heap_in_use() - before;
  return m;
}

void expect_close(const Measured& m, const std::string& what) {
  BOOST_TEST_MESSAGE(what << ": estimate " << m.estimate << " bytes, held " << m.held);
  BOOST_TEST(m.estimate > 128.0 * 1024, what << ": too small a case to tell (" << m.estimate << " bytes)");
  const double slack = 0.001 * m.estimate + 2048.0;
  BOOST_TEST(std::abs(m.held - m.estimate) <= slack,
             what << ": estimate " << m.estimate << ", held " << m.held);
}

tt::Model transformer_model() {
  tt::Model m;
  m.vocab_size = 1000;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.ffn_hidden_size = 160;
  m.seq_length = 128;
  return m;
}

constexpr int64_t kBatch = 4;
constexpr int64_t kSeq = 128;

Tensor hidden_states(int64_t hidden, std::mt19937_64& rng) {
  return tt::random_tensor({kBatch, kSeq, hidden}, plx_dtype_f32(), rng);
}

Tensor token_ids(int64_t vocab, std::mt19937_64& rng) {
  std::vector<int32_t> ids(static_cast<std::size_t>(kBatch * kSeq));
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  for (int32_t& id : ids) id = pick(rng);
  return Tensor::ints({kBatch, kSeq}, ids);
}

}  // namespace

// Attention (its probabilities [B, heads, S, S] the largest part) and the MLP, GeLU and SwiGLU.
BOOST_AUTO_TEST_CASE(attention_and_mlp) {
  std::mt19937_64 rng(1);
  tt::Model m = transformer_model();
  for (const char* name : {"transformer.attention", "transformer.mlp"}) {
    const tt::Layer layer(name, m);
    expect_close(
        measure(*layer, {hidden_states(m.hidden_size, rng)}, tt::random_params(*layer, plx_dtype_f32(), rng)),
        name);
  }
  m.activation = "swiglu";
  const tt::Layer swiglu("transformer.mlp", m);
  expect_close(
      measure(*swiglu, {hidden_states(m.hidden_size, rng)}, tt::random_params(*swiglu, plx_dtype_f32(), rng)),
      "transformer.mlp (swiglu)");
}

// The embedding (its token ids), the final norm, the head (the hidden states and the logits'
// gradient) and the MTP entry.
BOOST_AUTO_TEST_CASE(embedding_norm_head_and_mtp_entry) {
  std::mt19937_64 rng(2);
  const tt::Model m = transformer_model();
  const tt::Layer embedding("transformer.embedding", m);
  const Measured e = measure(*embedding, {token_ids(m.vocab_size, rng)},
                             tt::random_params(*embedding, plx_dtype_f32(), rng));
  // 2 KiB of ids: exact up to the vector's header, far below the other cases' floor.
  BOOST_TEST(e.estimate == 4.0 * kBatch * kSeq);
  BOOST_TEST(std::abs(e.held - e.estimate) <= 64.0,
             "embedding: estimate " << e.estimate << ", held " << e.held);
  const tt::Layer norm("transformer.norm", m);
  expect_close(
      measure(*norm, {hidden_states(m.hidden_size, rng)}, tt::random_params(*norm, plx_dtype_f32(), rng)),
      "transformer.norm");
  const tt::Layer head("transformer.lm_head", m);
  expect_close(measure(*head, {hidden_states(m.hidden_size, rng), token_ids(m.vocab_size, rng)},
                       tt::random_params(*head, plx_dtype_f32(), rng)),
               "transformer.lm_head");
  const tt::Layer entry("transformer.mtp_entry", m);
  expect_close(measure(*entry, {hidden_states(m.hidden_size, rng), hidden_states(m.hidden_size, rng)},
                       tt::random_params(*entry, plx_dtype_f32(), rng)),
               "transformer.mtp_entry");
}

// Context parallelism changes what attention keeps: one log-sum-exp per query row (float64)
// instead of the probabilities, for a rank's S / cp queries.
BOOST_AUTO_TEST_CASE(attention_under_cp_keeps_no_probabilities) {
  const tt::Model m = transformer_model();
  const tt::Layer layer("transformer.attention", m);
  const auto at = [&](int64_t seq, uint32_t cp) {
    plx_tensor_desc d{};
    d.ndim = 3;
    d.dtype = plx_dtype_f32();
    d.dims[0] = kBatch;
    d.dims[1] = seq;
    d.dims[2] = m.hidden_size;
    return *layer->estimate_activation_bytes({d}, cp);
  };
  const double rows = static_cast<double>(kBatch * m.num_attention_heads * kSeq);  // query rows
  const double probabilities = 4.0 * rows * static_cast<double>(kSeq), log_sum_exp = 8.0 * rows;
  BOOST_TEST(at(kSeq, 1) - at(kSeq, 2) == probabilities - log_sum_exp);
  // Everything else is per token: half the tokens, half of it.
  BOOST_TEST(2 * at(kSeq / 2, 2) - log_sum_exp == at(kSeq, 1) - probabilities);
}

// The Mamba-2 mixer (its state's six buffers, the chunk states included), and under context
// parallelism its share of the heads over the whole sequence: the rank's S / cp tokens' estimate
// is the whole sequence's with 1/cp of the heads.
BOOST_AUTO_TEST_CASE(mamba_mixer) {
  std::mt19937_64 rng(3);
  mamba_test::Config c;
  c.d_model = 32;
  c.options = {{"mamba_state_dim", 16}, {"mamba_head_dim", 8}, {"mamba_num_groups", 2}, {"chunk_size", 32}};
  const mamba_test::Layer layer(c);
  expect_close(measure(*layer, {hidden_states(c.d_model, rng)},
                       mamba_test::random_params(*layer, c, plx_dtype_f32(), rng)),
               "mamba.mixer");
  plx_tensor_desc half{};
  half.ndim = 3;
  half.dtype = plx_dtype_f32();
  half.dims[0] = kBatch;
  half.dims[1] = kSeq / 2;
  half.dims[2] = c.d_model;
  mamba_test::Config fewer = c;
  fewer.options["mamba_num_heads"] = c.heads() / 2;
  fewer.options["mamba_num_groups"] = c.groups() / 2;
  const mamba_test::Layer half_heads(fewer);
  plx_tensor_desc whole = half;
  whole.dims[1] = kSeq;
  BOOST_TEST(*layer->estimate_activation_bytes({half}, 2) ==
             *half_heads->estimate_activation_bytes({whole}, 1));
  // 2 groups do not divide over 4 ranks: refused, naming the option, as a run would be.
  BOOST_TEST(tt::mentions(tt::error_of([&] { (void)layer->estimate_activation_bytes({half}, 4); }),
                          "mamba_num_groups"));
}

// moe.layer: 4 experts, top 2, with shared experts and their gate; every routed pair is a row.
BOOST_AUTO_TEST_CASE(moe_layer) {
  std::mt19937_64 rng(4);
  moe_test::Config c;
  c.hidden = 32;
  c.ffn = 48;
  c.activation = "swiglu";
  c.options = {{"num_moe_experts", 4},
               {"moe_router_topk", 2},
               {"moe_shared_expert_intermediate_size", 32},
               {"moe_shared_expert_gate", true}};
  const moe_test::Layer layer(c);
  expect_close(measure(*layer, {hidden_states(c.hidden, rng)},
                       moe_test::random_params(*layer, c, plx_dtype_f32(), rng)),
               "moe.layer");
}

// transformer.attention's and transformer.mlp's weight gradients split from their input
// gradients (plx_layer_v1.backward_weights), on the real built plugin: backward with
// PLX_BACKWARD_SKIP_WEIGHT_GRADS and then backward_weights gives every gradient bit for bit as one
// backward without the flag (the same products in the same order), for attention with MHA and GQA
// (RoPE as the layer applies it), the MLP with gelu and SwiGLU, RMSNorm and LayerNorm, float32 and
// float64, accumulating onto gradients that already hold something. The layer keeps what it needs:
// the output gradient is overwritten between the two calls. Two microbatches in flight, each in its
// own state, give what they give one after the other. The embedding, final norm and head keep
// computing both in backward. And the calls out of contract are refused.
#define BOOST_TEST_MODULE transformer_split_weights
#include <boost/test/unit_test.hpp>

#include <random>
#include <string>
#include <vector>

#include "test_transformer_support.hpp"

namespace {

using tt::Tensor;

struct Case {
  std::string name;
  std::string component;
  tt::Model model;
};

tt::Model model(const std::string& normalization, int64_t heads, int64_t groups,
                const std::string& activation) {
  tt::Model m;
  m.hidden_size = 16;
  m.num_attention_heads = heads;
  m.num_query_groups = groups;
  m.normalization = normalization;
  m.activation = activation;
  return m;
}

std::vector<Case> cases() {
  return {
      {"attention, MHA, RMSNorm", "transformer.attention", model("RMSNorm", 4, 4, "gelu")},
      {"attention, MHA, LayerNorm", "transformer.attention", model("LayerNorm", 4, 4, "gelu")},
      {"attention, GQA, RMSNorm", "transformer.attention", model("RMSNorm", 4, 2, "gelu")},
      {"attention, GQA, LayerNorm", "transformer.attention", model("LayerNorm", 4, 2, "gelu")},
      {"mlp, gelu, RMSNorm", "transformer.mlp", model("RMSNorm", 4, 4, "gelu")},
      {"mlp, gelu, LayerNorm", "transformer.mlp", model("LayerNorm", 4, 4, "gelu")},
      {"mlp, swiglu, RMSNorm", "transformer.mlp", model("RMSNorm", 4, 4, "swiglu")},
      {"mlp, swiglu, LayerNorm", "transformer.mlp", model("LayerNorm", 4, 4, "swiglu")},
  };
}

const char* dtype_name(DLDataType dtype) {
  return dtype.bits == 32 ? "float32" : "float64";
}

// seq 5 of seq_length 8: RoPE rotates every position by another angle.
constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 5;

// Gradients that already hold something, as a second microbatch's accumulation finds them.
std::vector<Tensor> starting_grads(const std::vector<Tensor>& params, DLDataType dtype) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g(p.shape, dtype);
    for (std::size_t k = 0; k < static_cast<std::size_t>(g.numel()); ++k)
      g.set(k, 0.001 * static_cast<double>(k % 7 + 1));
    grads.push_back(std::move(g));
  }
  return grads;
}

std::vector<std::vector<double>> values(const std::vector<Tensor>& ts) {
  std::vector<std::vector<double>> out;
  for (const Tensor& t : ts) out.push_back(t.values());
  return out;
}

// One microbatch's backward onto `grads`, returning its input gradient: unsplit, or with the
// flag and without backward_weights (the caller makes that call, see weights()).
std::vector<double> backward(tt::Run& run, const Tensor& dy, std::vector<Tensor>& grads, bool split) {
  std::vector<Tensor> go = {dy}, gi = {Tensor(dy.shape, dy.dtype)};
  std::vector<DLTensor> gov = tt::views(go), giv = tt::views(gi), pv = tt::views(run.params),
                        pgv = tt::views(grads);
  const plx_backward_args args =
      tt::backward_args(gov, giv, pv, pgv, 0.0, split ? PLX_BACKWARD_SKIP_WEIGHT_GRADS : 0u);
  run.layer.backward(*run.state, 0, args);
  // The layer must have kept its own copy of what it needs: the caller's buffer changes.
  for (std::size_t k = 0; k < static_cast<std::size_t>(go[0].numel()); ++k) go[0].set(k, 1e6);
  return gi[0].values();
}

// backward_weights of the run's state onto `grads`, called as the engine calls it: no
// activation gradients, only the parameters and their gradients.
void weights(tt::Run& run, std::vector<Tensor>& grads) {
  std::vector<DLTensor> pv = tt::views(run.params), pgv = tt::views(grads);
  plx_backward_args args{};
  args.struct_size = sizeof(args);
  args.num_params = static_cast<uint32_t>(pv.size());
  args.params = pv.data();
  args.param_grads = pgv.data();
  run.layer.backward_weights(*run.state, args);
}

void check_same_grads(const tt::Layer& layer, const std::vector<std::vector<double>>& expected,
                      const std::vector<std::vector<double>>& got) {
  BOOST_TEST_REQUIRE(expected.size() == got.size());
  for (std::size_t p = 0; p < expected.size(); ++p)
    BOOST_TEST_CONTEXT("gradient of " << layer->param(static_cast<uint32_t>(p)).name) {
      BOOST_TEST(expected[p] == got[p], boost::test_tools::per_element());
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(attention_and_mlp_split_and_the_rest_does_not) {
  const tt::Model m;
  for (const char* name : {"transformer.attention", "transformer.mlp"}) {
    tt::Layer layer(name, m);
    BOOST_TEST(layer->has_backward_weights(), name);
  }
  for (const char* name : {"transformer.embedding", "transformer.norm", "transformer.lm_head"}) {
    tt::Layer layer(name, m);
    BOOST_TEST(!layer->has_backward_weights(), name);
  }
}

BOOST_AUTO_TEST_CASE(split_weight_gradients_are_bit_identical_to_backward) {
  for (const Case& c : cases()) {
    for (const DLDataType dtype : {plx_dtype_f32(), plx_dtype_f64()}) {
      BOOST_TEST_CONTEXT(c.name << ", " << dtype_name(dtype)) {
        tt::Layer layer(c.component, c.model);
        std::mt19937_64 rng(11);
        const std::vector<Tensor> params = tt::random_params(*layer, dtype, rng);
        const Tensor h = tt::random_tensor({kBatch, kSeq, c.model.hidden_size}, dtype, rng);
        const Tensor dy = tt::random_tensor({kBatch, kSeq, c.model.hidden_size}, dtype, rng);

        tt::Run plain(*layer, {h}, params, dtype);
        plain.forward(true);
        std::vector<Tensor> plain_grads = starting_grads(params, dtype);
        const std::vector<double> plain_dx = backward(plain, dy, plain_grads, false);

        tt::Run split(*layer, {h}, params, dtype);
        split.forward(true);
        std::vector<Tensor> split_grads = starting_grads(params, dtype);
        const std::vector<double> split_dx = backward(split, dy, split_grads, true);
        // Backward left every parameter gradient as it was.
        check_same_grads(layer, values(starting_grads(params, dtype)), values(split_grads));
        weights(split, split_grads);

        BOOST_TEST(plain_dx == split_dx, boost::test_tools::per_element());
        // Every gradient moved off its starting value, so each path really added something.
        for (std::size_t p = 0; p < params.size(); ++p)
          BOOST_TEST(plain_grads[p].values() != starting_grads(params, dtype)[p].values(),
                     "gradient of " << layer->param(static_cast<uint32_t>(p)).name << " moved");
        check_same_grads(layer, values(plain_grads), values(split_grads));
      }
    }
  }
}

// fwd0, fwd1, bwd0 (skip), bwd1 (skip), backward_weights 1, backward_weights 0: each state keeps
// its own microbatch's operands. The reference runs each microbatch alone without the flag, in
// the order their weight gradients land (1, then 0), so the accumulation order is the same.
BOOST_AUTO_TEST_CASE(two_microbatches_in_flight_match_one_after_the_other) {
  for (const Case& c : cases()) {
    for (const DLDataType dtype : {plx_dtype_f32(), plx_dtype_f64()}) {
      BOOST_TEST_CONTEXT(c.name << ", " << dtype_name(dtype)) {
        tt::Layer layer(c.component, c.model);
        std::mt19937_64 rng(5);
        const std::vector<Tensor> params = tt::random_params(*layer, dtype, rng);
        std::vector<Tensor> h, dy;
        for (int mb = 0; mb < 2; ++mb) {
          h.push_back(tt::random_tensor({kBatch, kSeq, c.model.hidden_size}, dtype, rng));
          dy.push_back(tt::random_tensor({kBatch, kSeq, c.model.hidden_size}, dtype, rng));
        }

        std::vector<Tensor> reference_grads = starting_grads(params, dtype);
        std::vector<std::vector<double>> reference_dx(2);
        for (const int mb : {1, 0}) {
          tt::Run run(*layer, {h[mb]}, params, dtype);
          run.forward(true);
          reference_dx[mb] = backward(run, dy[mb], reference_grads, false);
        }

        std::vector<Tensor> grads = starting_grads(params, dtype);
        tt::Run run0(*layer, {h[0]}, params, dtype), run1(*layer, {h[1]}, params, dtype);
        run0.forward(true);
        run1.forward(true);
        const std::vector<double> dx0 = backward(run0, dy[0], grads, true);
        const std::vector<double> dx1 = backward(run1, dy[1], grads, true);
        weights(run1, grads);
        weights(run0, grads);

        BOOST_TEST(dx0 == reference_dx[0], boost::test_tools::per_element());
        BOOST_TEST(dx1 == reference_dx[1], boost::test_tools::per_element());
        check_same_grads(layer, values(reference_grads), values(grads));
      }
    }
  }
}

// backward_weights without a backward that left the weights out is refused, and so is a second
// call; a second backward or a forward over a state whose weight gradients are still due too
// (either would lose or overwrite what they need).
BOOST_AUTO_TEST_CASE(backward_weights_out_of_contract_is_refused) {
  for (const char* name : {"transformer.attention", "transformer.mlp"}) {
    BOOST_TEST_CONTEXT(name) {
      const tt::Model m;
      tt::Layer layer(name, m);
      const DLDataType dtype = plx_dtype_f64();
      std::mt19937_64 rng(4);
      const std::vector<Tensor> params = tt::random_params(*layer, dtype, rng);
      const Tensor h = tt::random_tensor({1, 3, m.hidden_size}, dtype, rng);
      const Tensor dy = tt::random_tensor({1, 3, m.hidden_size}, dtype, rng);
      std::vector<Tensor> grads = starting_grads(params, dtype);
      tt::Run run(*layer, {h}, params, dtype);

      run.forward(true);
      backward(run, dy, grads, false);
      const std::string unsplit = tt::error_of([&] { weights(run, grads); });
      BOOST_TEST(tt::mentions(unsplit, "without a backward that left them out"), unsplit);
      BOOST_TEST(tt::mentions(unsplit, name), unsplit);

      run.forward(true);
      backward(run, dy, grads, true);
      const std::string again = tt::error_of([&] { backward(run, dy, grads, true); });
      BOOST_TEST(tt::mentions(again, "again before backward_weights"), again);
      std::vector<DLTensor> in = tt::views(run.inputs), out = tt::views(run.outputs),
                            par = tt::views(run.params);
      const plx_forward_args fwd = tt::forward_args(in, out, par, PLX_FORWARD_TRAINING);
      const std::string forward = tt::error_of([&] { layer->forward(*run.state, 0, fwd); });
      BOOST_TEST(tt::mentions(forward, "before backward_weights"), forward);
      weights(run, grads);
      const std::string twice = tt::error_of([&] { weights(run, grads); });
      BOOST_TEST(tt::mentions(twice, "without a backward that left them out"), twice);
      // What was kept for the weight gradients is gone: another backward needs another forward.
      const std::string released = tt::error_of([&] { backward(run, dy, grads, false); });
      BOOST_TEST(tt::mentions(released, "without a training forward"), released);
    }
  }
}

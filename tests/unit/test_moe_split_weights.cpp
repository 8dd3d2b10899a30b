// moe.layer's weight gradients split from its input gradients (plx_layer_v1.backward_weights):
// backward with PLX_BACKWARD_SKIP_WEIGHT_GRADS and then backward_weights gives every gradient
// bit for bit as one backward without the flag (the same products in the same order), over
// gelu and SwiGLU, RMSNorm and LayerNorm, shared experts and a capacity, float32 and float64,
// accumulating onto gradients that already hold something. The layer keeps what it needs: the
// output gradient is overwritten between the two calls. And the calls out of contract are refused.
#define BOOST_TEST_MODULE moe_split_weights
#include <boost/test/unit_test.hpp>

#include <random>
#include <string>
#include <vector>

#include "test_moe_support.hpp"

namespace {

using tt::Tensor;

struct Case {
  std::string name;
  std::string normalization = "RMSNorm";
  std::string activation = "gelu";
  boost::json::object options{{"num_moe_experts", 4}, {"moe_router_topk", 2}};
};

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"gelu, RMSNorm"});
  out.push_back({"swiglu, LayerNorm", "LayerNorm", "swiglu"});
  Case shared{"shared experts, aux and z-loss"};
  shared.options = {{"num_moe_experts", 4},
                    {"moe_router_topk", 2},
                    {"moe_shared_expert_intermediate_size", 5},
                    {"moe_aux_loss_coeff", 0.1},
                    {"moe_z_loss_coeff", 0.01}};
  out.push_back(shared);
  Case capacity{"capacity 0.5 (dropped pairs)"};
  capacity.options = {{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_expert_capacity_factor", 0.5}};
  out.push_back(capacity);
  return out;
}

// The backward calls' loss scale: not 1, so both paths must apply it.
constexpr double kLossScale = 0.25;

// Gradients that already hold something, as a second microbatch's accumulation finds them.
std::vector<Tensor> starting_grads(const std::vector<Tensor>& params, DLDataType dtype) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g(p.shape, dtype);
    for (std::size_t k = 0; k < static_cast<std::size_t>(g.numel()); ++k) g.set(k, 0.001 * static_cast<double>(k % 7));
    grads.push_back(std::move(g));
  }
  return grads;
}

struct Result {
  std::vector<double> grad_input;
  std::vector<std::vector<double>> grads;
};

// One backward of the run's state: unsplit, or split with the output gradient overwritten
// before backward_weights.
Result backward(const moe_test::Layer& layer, moe_test::Run& run, const Tensor& dy, const std::vector<Tensor>& params,
                DLDataType dtype, bool split) {
  std::vector<Tensor> go = {dy}, gi = {Tensor(dy.shape, dtype)};
  std::vector<Tensor> pg = starting_grads(params, dtype);
  std::vector<DLTensor> gov = tt::views(go), giv = tt::views(gi), pv = tt::views(run.params), pgv = tt::views(pg);
  const plx_backward_args args =
      tt::backward_args(gov, giv, pv, pgv, kLossScale, split ? PLX_BACKWARD_SKIP_WEIGHT_GRADS : 0u);
  for (uint32_t stage = layer->info().num_stages; stage-- > 0;) layer->backward(*run.state, stage, args);
  if (split) {
    for (std::size_t k = 0; k < static_cast<std::size_t>(go[0].numel()); ++k) go[0].set(k, 1e6);
    plx_backward_args weights{};
    weights.struct_size = sizeof(weights);
    weights.num_params = args.num_params;
    weights.params = args.params;
    weights.param_grads = args.param_grads;
    weights.loss_scale = args.loss_scale;
    layer->backward_weights(*run.state, weights);
  }
  Result r{gi[0].values(), {}};
  for (const Tensor& g : pg) r.grads.push_back(g.values());
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(moe_layer_implements_backward_weights) {
  const moe_test::Config c;
  moe_test::Layer layer(c);
  BOOST_TEST(layer->has_backward_weights());
}

BOOST_AUTO_TEST_CASE(split_weight_gradients_are_bit_identical_to_backward) {
  for (const Case& k : cases()) {
    for (const DLDataType dtype : {plx_dtype_f32(), plx_dtype_f64()}) {
      BOOST_TEST_CONTEXT(k.name << ", " << (dtype.bits == 32 ? "float32" : "float64")) {
        moe_test::Config c;
        c.normalization = k.normalization;
        c.activation = k.activation;
        c.options = k.options;
        moe_test::Layer layer(c);
        std::mt19937_64 rng(11);
        const std::vector<Tensor> params = moe_test::random_params(*layer, c, dtype, rng);
        const Tensor h = tt::random_tensor({2, 5, c.hidden}, dtype, rng);
        const Tensor dy = tt::random_tensor({2, 5, c.hidden}, dtype, rng);
        std::vector<Result> results;
        for (const bool split : {false, true}) {
          moe_test::Run run(*layer, {h}, params, dtype);
          run.forward(true);
          results.push_back(backward(layer, run, dy, params, dtype, split));
        }
        BOOST_TEST(results[0].grad_input == results[1].grad_input, boost::test_tools::per_element());
        BOOST_TEST_REQUIRE(results[0].grads.size() == params.size());
        for (std::size_t p = 0; p < params.size(); ++p) {
          BOOST_TEST_CONTEXT("gradient of " << layer->param(static_cast<uint32_t>(p)).name) {
            const bool buffer = (layer->param(static_cast<uint32_t>(p)).flags & PLX_PARAM_BUFFER) != 0;
            // Every trained parameter's gradient moved off its starting value, so each path counts.
            if (!buffer) BOOST_TEST(results[0].grads[p] != starting_grads(params, dtype)[p].values());
            BOOST_TEST(results[0].grads[p] == results[1].grads[p], boost::test_tools::per_element());
          }
        }
      }
    }
  }
}

// backward_weights without a backward that left the weights out is refused, and so is a second
// call; so is a backward whose stages disagree on the flag.
BOOST_AUTO_TEST_CASE(backward_weights_out_of_contract_is_refused) {
  const moe_test::Config c;
  moe_test::Layer layer(c);
  std::mt19937_64 rng(4);
  const std::vector<Tensor> params = moe_test::random_params(*layer, c, plx_dtype_f64(), rng);
  const Tensor h = tt::random_tensor({1, 3, c.hidden}, plx_dtype_f64(), rng);
  const Tensor dy = tt::random_tensor({1, 3, c.hidden}, plx_dtype_f64(), rng);
  moe_test::Run run(*layer, {h}, params, plx_dtype_f64());
  run.forward(true);
  std::vector<Tensor> go = {dy}, gi = {Tensor(dy.shape, plx_dtype_f64())}, pg = starting_grads(params, plx_dtype_f64());
  std::vector<DLTensor> gov = tt::views(go), giv = tt::views(gi), pv = tt::views(run.params), pgv = tt::views(pg);
  const plx_backward_args plain = tt::backward_args(gov, giv, pv, pgv, kLossScale);
  const plx_backward_args skip =
      tt::backward_args(gov, giv, pv, pgv, kLossScale, PLX_BACKWARD_SKIP_WEIGHT_GRADS);
  const uint32_t last = layer->info().num_stages - 1;

  layer->backward(*run.state, last, skip);
  const std::string mixed = tt::error_of([&] { layer->backward(*run.state, last - 1, plain); });
  BOOST_TEST(tt::mentions(mixed, "PLX_BACKWARD_SKIP_WEIGHT_GRADS clear"), mixed);

  run.forward(true);
  for (uint32_t stage = last + 1; stage-- > 0;) layer->backward(*run.state, stage, plain);
  const std::string unsplit = tt::error_of([&] { layer->backward_weights(*run.state, plain); });
  BOOST_TEST(tt::mentions(unsplit, "without a backward that left them out"), unsplit);

  run.forward(true);
  for (uint32_t stage = last + 1; stage-- > 0;) layer->backward(*run.state, stage, skip);
  layer->backward_weights(*run.state, skip);
  const std::string twice = tt::error_of([&] { layer->backward_weights(*run.state, skip); });
  BOOST_TEST(tt::mentions(twice, "without a backward that left them out"), twice);
}

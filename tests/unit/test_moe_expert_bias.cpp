// The aux-loss-free expert bias of moe.layer (the real built plugin, one process): it is declared
// as a buffer under Megatron's name; after_step moves it by rate * sign(mean - count_i) from the
// tokens each expert took in the step's training forwards (microbatches added, evaluation
// forwards not counted) and reports those counts once; it enters the top-k selection and nothing
// else. The sum over data-parallel ranks is tested by tests/mpi/test_moe_bias_ranks.cpp, the
// engine's handling (no gradient, no optimizer state, checkpoint and resume) by
// tests/integration/test_moe_training.cpp.
#define BOOST_TEST_MODULE moe_expert_bias
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test_moe_bias_support.hpp"

namespace {

using tt::Tensor;

std::vector<double> reported_counts() {
  std::vector<double> out;
  for (int e = 0; e < 4; ++e) {
    const auto it = moe_test::reported().find("layer0.tokens_per_expert." + std::to_string(e));
    out.push_back(it == moe_test::reported().end() ? -1.0 : it->second);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_bias_is_a_buffer_under_megatrons_name_only_when_enabled) {
  moe_test::Layer with(moe_bias_test::config(1e-3));
  const plx_param_spec bias = with->param(static_cast<uint32_t>(moe_test::param_index(*with, "mlp.router.expert_bias")));
  BOOST_TEST((bias.flags & PLX_PARAM_BUFFER) != 0u);
  BOOST_TEST(bias.desc.ndim == 1u);
  BOOST_TEST(bias.desc.dims[0] == 4);
  BOOST_TEST(bias.init == uint32_t{PLX_INIT_ZEROS});
  BOOST_TEST(bias.grad_group == nullptr);  // a buffer is whole on every rank
  BOOST_TEST(with->has_after_step());        // the C++ helper fills it in: moe.layer overrides it
  moe_test::Config off;
  moe_test::Layer without(off);
  for (uint32_t i = 0; i < without->info().num_params; ++i)
    BOOST_TEST(std::string(without->param(i).name) != "mlp.router.expert_bias");
  moe_test::Config bad = moe_bias_test::config(-0.5);
  const std::string error = tt::error_of([&] { moe_test::Layer layer(bad); });
  BOOST_TEST(tt::mentions(error, "moe_router_bias_update_rate must be a finite number >= 0, got -0.5"), error);
}

// Counts 5, 2, 1, 0 over two microbatches (mean 2): the bias moves by -rate, 0, +rate, +rate,
// exactly (a multiple of a power of two), and again by as much after a second identical step; an
// evaluation forward in between counts nothing; a step without a training forward changes
// nothing and reports nothing.
BOOST_AUTO_TEST_CASE(after_step_moves_the_bias_by_the_sign_of_mean_minus_count) {
  const double rate = 0.125;  // two steps move two experts' biases apart by 4 rate = 0.5 < 1
  const moe_test::Config c = moe_bias_test::config(rate);
  moe_test::Layer layer(c);
  const DLDataType f32 = plx_dtype_f32();
  std::vector<Tensor> params = moe_bias_test::params(*layer, c, f32);
  const std::size_t b = moe_test::param_index(*layer, "mlp.router.expert_bias");
  const std::vector<std::vector<int>> microbatches = {{0, 0, 1, 0, 2}, {0, 1, 0}};
  for (int step = 1; step <= 2; ++step) {
    moe_test::reported().clear();
    for (const auto& tokens : microbatches) {
      moe_test::Run run(*layer, {moe_bias_test::tokens_to(tokens, c, f32)}, params, f32);
      run.forward(true);
    }
    moe_test::Run eval(*layer, {moe_bias_test::tokens_to({3, 3, 3}, c, f32)}, params, f32);
    eval.forward(false);
    BOOST_TEST(reported_counts() == (std::vector<double>{-1, -1, -1, -1}), boost::test_tools::per_element());
    moe_bias_test::after_step(*layer, params, step - 1);
    BOOST_TEST(reported_counts() == (std::vector<double>{5, 2, 1, 0}), boost::test_tools::per_element());
    const std::vector<double> expected = {-step * rate, 0.0, step * rate, step * rate};
    BOOST_TEST(params[b].values() == expected, boost::test_tools::per_element());
  }
  moe_test::reported().clear();
  moe_bias_test::after_step(*layer, params, 2);
  BOOST_TEST(params[b].values() == (std::vector<double>{-2 * rate, 0.0, 2 * rate, 2 * rate}),
             boost::test_tools::per_element());
  BOOST_TEST(moe_test::reported().empty());
}

// The bias changes which experts are chosen but not the weights of the chosen: with k = E every
// expert is chosen whatever the bias, so a large bias leaves the output as it was (up to the
// order of the k weighted sums: 1e-13 in float64); with k = 2 a bias of +50 on expert 3 sends
// every token there, and the output changes. The bias is defined on sigmoid scores (as in
// Megatron-LM, which refuses it with softmax scores: so does the layer, naming both options).
BOOST_AUTO_TEST_CASE(the_bias_moves_the_selection_not_the_combine_weights) {
  for (const std::string score : {"softmax", "pre_softmax"}) {
    moe_test::Config c;
    c.options = {{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_router_enable_expert_bias", true}};
    if (score == "pre_softmax") c.options["moe_router_pre_softmax"] = true;
    const std::string e = tt::error_of([&] { moe_test::Layer layer(c); });
    BOOST_TEST((tt::mentions(e, "moe_router_enable_expert_bias") && tt::mentions(e, "sigmoid")), e);
  }
  for (const std::string score : {"sigmoid"}) {
    for (const int64_t k : {4, 2}) {
      moe_test::Config c;
      c.options = {{"num_moe_experts", 4},
                   {"moe_router_topk", k},
                   {"moe_router_enable_expert_bias", true},
                   {"moe_router_score_function", "sigmoid"}};
      moe_test::Layer layer(c);
      std::mt19937_64 rng(7);
      std::vector<Tensor> params = moe_test::random_params(*layer, c, plx_dtype_f64(), rng);
      const std::size_t b = moe_test::param_index(*layer, "mlp.router.expert_bias");
      const Tensor h = tt::random_tensor({2, 6, c.hidden}, plx_dtype_f64(), rng);
      params[b].fill(0.0);
      moe_test::Run plain(*layer, {h}, params, plx_dtype_f64());
      const std::vector<double> unbiased = plain.forward(true)[0].values();
      moe_bias_test::after_step(*layer, params, 0);  // ends the step: its counts start again at zero
      for (std::size_t e = 0; e < 3; ++e) params[b].set(e, k == 4 ? 3.0 * static_cast<double>(e) - 4.0 : 0.0);
      params[b].set(3, 50.0);
      moe_test::Run biased(*layer, {h}, params, plx_dtype_f64());
      const std::vector<double> out = biased.forward(true)[0].values();
      double worst = 0;
      for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - unbiased[i]));
      BOOST_TEST_INFO(score << ", k = " << k);
      if (k == 4) {
        BOOST_TEST(worst <= 1e-13);
      } else {
        BOOST_TEST(worst > 1e-3);
        moe_test::reported().clear();
        moe_bias_test::after_step(*layer, params, 1);
        // 12 tokens, each with expert 3 in its pair.
        BOOST_TEST(moe_test::reported().at("layer0.tokens_per_expert.3") == 12.0);
        double total = 0;
        for (int e = 0; e < 4; ++e) total += moe_test::reported().at("layer0.tokens_per_expert." + std::to_string(e));
        BOOST_TEST(total == 12.0 * 2);
      }
    }
  }
}

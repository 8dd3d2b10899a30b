// AdamW, clipping and the learning-rate schedule against hand computations.
#define BOOST_TEST_MODULE optimizer
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <stdexcept>
#include <string>

#include "plexus/core/engine/optimizer.hpp"

namespace {

plx_param_spec spec(const char* name, uint32_t flags) {
  plx_param_spec s{};
  s.struct_size = sizeof(s);
  s.name = name;
  s.flags = flags;
  s.desc.ndim = 1;
  s.desc.dims[0] = 2;
  s.desc.dtype = plx_dtype_f32();
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(schedule_warmup_then_cosine_to_min) {
  plexus::OptimizerSettings s;
  s.lr = 1.0;
  s.min_lr = 0.1;
  s.warmup_steps = 4;
  s.total_steps = 14;
  BOOST_TEST(plexus::learning_rate(s, 0) == 0.25);
  BOOST_TEST(plexus::learning_rate(s, 3) == 1.0);
  BOOST_TEST(plexus::learning_rate(s, 4) == 1.0);                                // decay starts at the peak
  BOOST_TEST(plexus::learning_rate(s, 9) == 0.55, boost::test_tools::tolerance(1e-12));  // halfway: mean
  BOOST_TEST(plexus::learning_rate(s, 14) == 0.1, boost::test_tools::tolerance(1e-12));
  s.decay_style = "linear";
  BOOST_TEST(plexus::learning_rate(s, 9) == 0.55, boost::test_tools::tolerance(1e-12));
  s.decay_style = "constant";
  BOOST_TEST(plexus::learning_rate(s, 13) == 1.0);
}

BOOST_AUTO_TEST_CASE(adamw_step_matches_the_formula_and_skips_decay_where_flagged) {
  plexus::ParameterStore store;
  store.declare(spec("w", 0), "", "test");
  store.declare(spec("norm.weight", PLX_PARAM_NO_WEIGHT_DECAY), "", "test");
  for (std::size_t i = 0; i < 2; ++i) {
    store[i].value.data<float>()[0] = 1.0f;
    store[i].value.data<float>()[1] = -2.0f;
    store[i].grad.data<float>()[0] = 0.5f;
    store[i].grad.data<float>()[1] = -0.25f;
  }
  plexus::OptimizerSettings s;
  s.lr = 0.1;
  s.min_lr = 0.1;
  s.decay_style = "constant";
  s.weight_decay = 0.5;
  s.clip_grad = 0;  // no clipping in this case
  plexus::AdamW adam(store, s);
  const double norm = adam.step(0);
  BOOST_TEST(norm == std::sqrt(2 * (0.25 + 0.0625)), boost::test_tools::tolerance(1e-12));
  // Step 1: m = (1-b1) g, v = (1-b2) g^2; bias-corrected m/sqrt(v) = sign(g); so
  // w <- w (1 - lr wd) - lr * g / (|g| + eps').
  const double eps_hat = 1e-8;
  for (int k = 0; k < 2; ++k) {
    const double w0 = k == 0 ? 1.0 : -2.0;
    const double g = k == 0 ? 0.5 : -0.25;
    const double decayed = w0 * (1 - 0.1 * 0.5) - 0.1 * g / (std::abs(g) + eps_hat);
    const double plain = w0 - 0.1 * g / (std::abs(g) + eps_hat);
    BOOST_TEST(store[0].value.data<float>()[k] == decayed, boost::test_tools::tolerance(1e-6));
    BOOST_TEST(store[1].value.data<float>()[k] == plain, boost::test_tools::tolerance(1e-6));
  }
}

BOOST_AUTO_TEST_CASE(clipping_scales_the_gradient_to_the_max_norm) {
  plexus::ParameterStore store;
  store.declare(spec("w", PLX_PARAM_NO_WEIGHT_DECAY), "", "test");
  store[0].grad.data<float>()[0] = 3.0f;
  store[0].grad.data<float>()[1] = 4.0f;  // norm 5
  plexus::OptimizerSettings s;
  s.lr = 1.0;
  s.decay_style = "constant";
  s.clip_grad = 1.0;
  s.beta1 = 0.0;  // m = clipped g
  s.beta2 = 0.0;  // v = clipped g^2: update = lr * g / (|g| + eps) regardless of scale...
  plexus::AdamW adam(store, s);
  BOOST_TEST(adam.step(0) == 5.0, boost::test_tools::tolerance(1e-12));
  // ...so check the moments instead: exp_avg holds the clipped gradient (3, 4) / 5.
  const auto state = adam.state_tensors();
  BOOST_TEST(state[0].first == "w.exp_avg");
  BOOST_TEST(state[0].second->data<float>()[0] == 0.6f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(state[0].second->data<float>()[1] == 0.8f, boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(tied_declarations_share_one_parameter_and_mismatches_are_refused) {
  plexus::ParameterStore store;
  const auto a = store.declare(spec("embedding.word_embeddings.weight", 0), "", "embedding");
  const auto b = store.declare(spec("embedding.word_embeddings.weight", 0), "", "head");
  BOOST_TEST(a == b);
  BOOST_TEST(store.size() == 1U);
  plx_param_spec wrong = spec("embedding.word_embeddings.weight", 0);
  wrong.desc.dims[0] = 3;
  BOOST_CHECK_EXCEPTION(store.declare(wrong, "", "other"), std::runtime_error, [](const std::runtime_error& e) {
    return std::string(e.what()).find("[2]") != std::string::npos && std::string(e.what()).find("[3]") != std::string::npos;
  });
}

// A buffer (PLX_PARAM_BUFFER, e.g. an MoE router's expert bias) is state, not a parameter: it has
// no gradient, AdamW neither moves it nor counts it in the norm, and it has no moments; a buffer
// that asks for a gradient group is refused, naming it.
BOOST_AUTO_TEST_CASE(a_buffer_has_no_gradient_no_moments_and_is_not_optimized) {
  plexus::ParameterStore store;
  store.declare(spec("w", 0), "", "test");
  store.declare(spec("mlp.router.expert_bias", PLX_PARAM_BUFFER), "", "test");
  BOOST_TEST(store[1].is_buffer());
  BOOST_TEST(store[1].grad.empty());
  BOOST_TEST(store[1].grad.view().data == nullptr);  // what the layer's param_grads entry holds
  store[0].grad.data<float>()[0] = 3.0f;
  store[0].grad.data<float>()[1] = 4.0f;
  store[1].value.data<float>()[0] = 0.5f;
  store[1].value.data<float>()[1] = -0.5f;
  store.zero_grads();
  store[0].grad.data<float>()[0] = 3.0f;
  store[0].grad.data<float>()[1] = 4.0f;
  plexus::OptimizerSettings s;
  s.lr = 0.1;
  s.decay_style = "constant";
  s.weight_decay = 0.5;
  s.clip_grad = 0;
  plexus::AdamW adam(store, s);
  BOOST_TEST(adam.step(0) == 5.0);  // the parameter's gradient alone
  BOOST_TEST(store[1].value.data<float>()[0] == 0.5f);
  BOOST_TEST(store[1].value.data<float>()[1] == -0.5f);
  const auto moments = adam.state_tensors();
  BOOST_TEST_REQUIRE(moments.size() == 2u);
  BOOST_TEST(moments[0].first == "w.exp_avg");
  BOOST_TEST(moments[1].first == "w.exp_avg_sq");

  plx_param_spec grouped = spec("grouped", PLX_PARAM_BUFFER);
  grouped.grad_group = "expert_dp";
  try {
    store.declare(grouped, "", "test");
    BOOST_FAIL("a buffer with a grad_group was accepted");
  } catch (const std::runtime_error& e) {
    BOOST_TEST(std::string(e.what()).find("grouped is a buffer (PLX_PARAM_BUFFER) with grad_group \"expert_dp\"") !=
               std::string::npos, e.what());
  }
}

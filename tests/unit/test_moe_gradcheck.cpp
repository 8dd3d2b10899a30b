// Gradient checks of moe.layer (the real built plugin) in float64: the hand-written backward of
// the whole layer (pre-norm, router, top-k probabilities, permutation, the grouped expert MLPs,
// unpermutation, and the load-balancing and z-losses) against central finite differences of its
// forward, for every element of the input and of every parameter.
//
// The checked function is L = sum(r * F(h)) + s (aux + z) with r ~ N(0, 1) and the loss scale
// s = 0.25 handed to backward (plx_backward_args.loss_scale): the auxiliary losses' gradients
// must arrive scaled by it. aux and z are the values the layer reports (report_metric).
//
// Ties: the top-k choice is piecewise constant, so a finite difference must not move a token's
// k-th logit past its (k+1)-th; nor, under a capacity dropping by probability, an expert's last
// kept probability past its first dropped one. Each case draws inputs and parameters until every
// such gap is at least 1e-3 (recomputed here from the contract in float64), 1000 times what a
// step of h = 1e-6 can move a logit or a probability (their derivatives are O(1) here). The draws
// that pass are then fixed by their seeds.
//
// Tolerance: |analytic - numeric| <= 1e-6 |numeric| + 1e-7 per element: the central difference's
// truncation error ~ h^2 |L'''| / 6 ~ 1e-12 and its rounding error ~ 1e-15 / h ~ 1e-9. A real
// mistake (a missing term, a wrong index, an unscaled aux gradient) gives errors of 1e-3 or more.
#define BOOST_TEST_MODULE moe_gradcheck
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "test_moe_support.hpp"

namespace {

using tt::Tensor;

constexpr double kStep = 1e-6;
constexpr double kRelTol = 1e-6;
constexpr double kAbsTol = 1e-7;
constexpr double kLossScale = 0.25;
const DLDataType kF64 = plx_dtype_f64();

double objective(moe_test::Run& run, const Tensor& r) {
  moe_test::reported().clear();
  const std::vector<Tensor>& out = run.forward(true);
  double l = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(r.numel()); ++i) l += r.get(i) * out[0].get(i);
  return l + kLossScale * (moe_test::reported().at("layer0.aux_loss") + moe_test::reported().at("layer0.z_loss"));
}

std::vector<double> numeric(moe_test::Run& run, Tensor& t, const Tensor& r) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double saved = t.get(i);
    t.set(i, saved + kStep);
    const double plus = objective(run, r);
    t.set(i, saved - kStep);
    const double minus = objective(run, r);
    t.set(i, saved);
    out[i] = (plus - minus) / (2 * kStep);
  }
  return out;
}

void compare(const std::string& what, const std::vector<double>& a, const std::vector<double>& n) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(a.size() == n.size());
    double largest = 0, worst_abs = 0;
    std::size_t failures = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double err = std::abs(a[i] - n[i]);
      largest = std::max(largest, std::abs(n[i]));
      worst_abs = std::max(worst_abs, err);
      if (err > kRelTol * std::abs(n[i]) + kAbsTol && ++failures <= 5)
        BOOST_ERROR("element " << i << ": analytic " << a[i] << ", numeric " << n[i]);
    }
    BOOST_TEST_MESSAGE(what << ": " << a.size() << " elements, largest |grad| " << largest << ", worst error "
                            << worst_abs);
    BOOST_TEST(failures == 0u);
    // A gradient that is zero everywhere would pass trivially.
    BOOST_TEST(largest > 1e3 * kAbsTol);
  }
}

void gradcheck(const moe_test::Config& c, int64_t batch, int64_t seq, uint64_t seed) {
  moe_test::Layer layer(c);
  std::vector<Tensor> params;
  Tensor h;
  for (int draw = 0;; ++draw) {
    BOOST_TEST_REQUIRE(draw < 100, "no draw without near-ties in 100 tries");
    std::mt19937_64 rng(seed + static_cast<uint64_t>(draw));
    params = moe_test::random_params(*layer, c, kF64, rng);
    h = tt::random_tensor({batch, seq, c.hidden}, kF64, rng);
    const std::vector<double> z = moe_test::logits(c, *layer, h, params);
    const double margin = std::min({moe_test::routing_margin(z, c.experts(), c.topk()),
                                    moe_test::capacity_margin(c, z), moe_test::group_margin(c, z)});
    if (margin >= 1e-3) {
      BOOST_TEST_MESSAGE("draw " << draw << ": routing margin " << margin);
      break;
    }
  }
  if (moe_test::option(c, "moe_router_num_groups") > 0) {
    // The groups must matter: some token's group-limited choice differs from its plain top-k.
    const std::vector<double> z = moe_test::logits(c, *layer, h, params);
    int differ = 0;
    for (std::size_t t = 0; t < z.size() / static_cast<std::size_t>(c.experts()); ++t) {
      const double* row = z.data() + t * static_cast<std::size_t>(c.experts());
      double unused = 1e300;
      std::vector<int> grouped = moe_test::group_choice(c, row, unused), plain(static_cast<std::size_t>(c.experts()));
      for (int i = 0; i < c.experts(); ++i) plain[static_cast<std::size_t>(i)] = i;
      std::stable_sort(plain.begin(), plain.end(), [&](int a, int b) { return row[a] > row[b]; });
      plain.resize(static_cast<std::size_t>(c.topk()));
      std::sort(grouped.begin(), grouped.end());
      std::sort(plain.begin(), plain.end());
      differ += grouped != plain;
    }
    BOOST_TEST_MESSAGE("tokens whose choice the groups changed: " << differ);
    BOOST_TEST(differ > 0);
  }
  std::mt19937_64 rng(seed ^ 0x5eed);
  const Tensor r = tt::random_tensor({batch, seq, c.hidden}, kF64, rng);

  moe_test::Run run(*layer, {h}, params, kF64);
  run.forward(true);
  if (c.coeff("moe_aux_loss_coeff") > 0) BOOST_TEST(moe_test::reported().at("layer0.aux_loss") > 0);
  if (c.coeff("moe_z_loss_coeff") > 0) BOOST_TEST(moe_test::reported().at("layer0.z_loss") > 0);
  if (c.options.contains("moe_expert_capacity_factor")) BOOST_TEST(moe_test::reported().at("layer0.dropped_pairs") > 0);
  std::vector<Tensor> go = {r}, gi = {Tensor(h.shape, kF64)}, gp;
  for (const Tensor& p : params) gp.emplace_back(p.shape, kF64);
  run.backward(go, gi, gp, kLossScale);

  compare("input", gi[0].values(), numeric(run, run.inputs[0], r));
  for (std::size_t i = 0; i < params.size(); ++i)
    if (std::string(layer->param(static_cast<uint32_t>(i)).name).find("local_experts") == std::string::npos ||
        [&] {
          for (double v : gp[i].values())
            if (v != 0) return true;
          return false;
        }())
      compare(layer->param(static_cast<uint32_t>(i)).name, gp[i].values(), numeric(run, run.params[i], r));
    else  // an expert that received no token: no gradient, and none numerically either
      for (double v : numeric(run, run.params[i], r)) BOOST_TEST(std::abs(v) <= kAbsTol);
}

moe_test::Config with(boost::json::object options) {
  moe_test::Config c;
  c.options = std::move(options);
  return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(softmax_after_topk_gelu_rmsnorm_with_aux_and_z_loss) {
  gradcheck(with({{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_aux_loss_coeff", 0.3},
                  {"moe_z_loss_coeff", 0.05}}),
            2, 5, 11);
}

BOOST_AUTO_TEST_CASE(softmax_before_topk_swiglu_layernorm_with_aux_and_z_loss) {
  moe_test::Config c = with({{"num_moe_experts", 5}, {"moe_router_topk", 3}, {"moe_router_pre_softmax", true},
                             {"moe_aux_loss_coeff", 0.3}, {"moe_z_loss_coeff", 0.05}});
  c.normalization = "LayerNorm";
  c.activation = "swiglu";
  gradcheck(c, 2, 4, 21);
}

BOOST_AUTO_TEST_CASE(top1_softmax_router_gets_only_the_aux_gradients) {
  // With k = 1 after-top-k softmax gives p = 1: the router's gradient is the aux and z terms only.
  gradcheck(with({{"num_moe_experts", 3}, {"moe_router_topk", 1}, {"moe_aux_loss_coeff", 0.5},
                  {"moe_z_loss_coeff", 0.1}}),
            1, 7, 31);
}

BOOST_AUTO_TEST_CASE(sigmoid_scores_normalized_over_the_topk) {
  gradcheck(with({{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_router_score_function", "sigmoid"},
                  {"moe_aux_loss_coeff", 0.3}, {"moe_z_loss_coeff", 0.05}}),
            2, 5, 41);
}

BOOST_AUTO_TEST_CASE(sigmoid_top1_unnormalized) {
  gradcheck(with({{"num_moe_experts", 4}, {"moe_router_topk", 1}, {"moe_router_score_function", "sigmoid"},
                  {"moe_aux_loss_coeff", 0.3}}),
            2, 4, 51);
}

// k = E: every token goes to every expert (no choice to tie on).
BOOST_AUTO_TEST_CASE(topk_of_all_experts) {
  gradcheck(with({{"num_moe_experts", 3}, {"moe_router_topk", 3}, {"moe_aux_loss_coeff", 0.2}}), 1, 4, 61);
}

// 8 experts, 3 tokens, k = 1: at least five experts receive no token (empty row blocks).
BOOST_AUTO_TEST_CASE(experts_without_tokens) {
  moe_test::Config c = with({{"num_moe_experts", 8}, {"moe_router_topk", 1}, {"moe_z_loss_coeff", 0.05}});
  c.activation = "swiglu";
  gradcheck(c, 1, 3, 71);
}

// A capacity of ceil(T k / E * 0.5): about half the pairs are dropped, the kept ones by
// probability; then by position.
BOOST_AUTO_TEST_CASE(capacity_drops_by_probability) {
  gradcheck(with({{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_expert_capacity_factor", 0.5},
                  {"moe_aux_loss_coeff", 0.3}}),
            2, 6, 81);
}

BOOST_AUTO_TEST_CASE(capacity_drops_by_position) {
  gradcheck(with({{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_expert_capacity_factor", 0.75},
                  {"moe_token_drop_policy", "position"}, {"moe_z_loss_coeff", 0.05}}),
            2, 6, 91);
}

BOOST_AUTO_TEST_CASE(shared_experts_swiglu) {
  moe_test::Config c = with({{"num_moe_experts", 3}, {"moe_router_topk", 2}, {"moe_shared_expert_intermediate_size", 5},
                             {"moe_aux_loss_coeff", 0.3}});
  c.activation = "swiglu";
  gradcheck(c, 2, 4, 101);
}

// Group-limited routing: 6 experts in 2 groups, a token chooses within its best group (scored by
// the sum of its 2 largest logits); then 8 sigmoid experts in 4 groups, 2 chosen, k = 4 (each
// group scored by its 2 largest sigmoid scores).
BOOST_AUTO_TEST_CASE(group_limited_softmax) {
  gradcheck(with({{"num_moe_experts", 6}, {"moe_router_topk", 2}, {"moe_router_num_groups", 2},
                  {"moe_router_group_topk", 1}, {"moe_aux_loss_coeff", 0.3}, {"moe_z_loss_coeff", 0.05}}),
            2, 5, 111);
}

BOOST_AUTO_TEST_CASE(group_limited_sigmoid) {
  gradcheck(with({{"num_moe_experts", 8}, {"moe_router_topk", 4}, {"moe_router_num_groups", 4},
                  {"moe_router_group_topk", 2}, {"moe_router_score_function", "sigmoid"}, {"moe_aux_loss_coeff", 0.3}}),
            2, 5, 121);
}

// moe_router_topk_scaling_factor (DeepSeek-V3 uses 2.5): the chosen experts' weights multiplied
// after the score function, for each score function.
BOOST_AUTO_TEST_CASE(topk_scaling_factor_for_every_score_function) {
  gradcheck(with({{"num_moe_experts", 4},
                  {"moe_router_topk", 2},
                  {"moe_router_topk_scaling_factor", 2.5},
                  {"moe_aux_loss_coeff", 0.3},
                  {"moe_z_loss_coeff", 0.05}}),
            2, 5, 131);
  gradcheck(with({{"num_moe_experts", 4},
                  {"moe_router_topk", 2},
                  {"moe_router_pre_softmax", true},
                  {"moe_router_topk_scaling_factor", 2.5},
                  {"moe_aux_loss_coeff", 0.3}}),
            2, 5, 132);
  gradcheck(with({{"num_moe_experts", 4},
                  {"moe_router_topk", 2},
                  {"moe_router_score_function", "sigmoid"},
                  {"moe_router_topk_scaling_factor", 2.5},
                  {"moe_aux_loss_coeff", 0.3}}),
            2, 5, 133);
}

// Without a shared expert the layer's output is the weighted sum of the chosen experts' outputs,
// so the factor scales it exactly (up to one rounding per element in float64).
BOOST_AUTO_TEST_CASE(topk_scaling_factor_scales_the_routed_output) {
  for (const char* score : {"softmax", "sigmoid"}) {
    const moe_test::Config plain =
        with({{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_router_score_function", score}});
    moe_test::Config scaled = plain;
    scaled.options["moe_router_topk_scaling_factor"] = 2.5;
    moe_test::Layer a(plain), b(scaled);
    std::mt19937_64 rng(141);
    const std::vector<Tensor> params = moe_test::random_params(*a, plain, kF64, rng);
    const Tensor h = tt::random_tensor({2, 5, plain.hidden}, kF64, rng);
    moe_test::Run run_a(*a, {h}, params, kF64), run_b(*b, {h}, params, kF64);
    const std::vector<double> y = run_a.forward(true)[0].values(), z = run_b.forward(true)[0].values();
    double worst = 0, largest = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      worst = std::max(worst, std::abs(z[i] - 2.5 * y[i]));
      largest = std::max(largest, std::abs(y[i]));
    }
    BOOST_TEST_INFO(score);
    BOOST_TEST(largest > 0.0);
    BOOST_TEST(worst <= 1e-13 * largest);
  }
}

// moe_shared_expert_gate: the shared expert's output scaled per token by sigmoid(u . g), g the
// parameter mlp.shared_experts.gate_weight; GeLU and SwiGLU shared experts.
BOOST_AUTO_TEST_CASE(shared_expert_gate) {
  gradcheck(with({{"num_moe_experts", 3},
                  {"moe_router_topk", 2},
                  {"moe_shared_expert_intermediate_size", 5},
                  {"moe_shared_expert_gate", true},
                  {"moe_aux_loss_coeff", 0.3}}),
            2, 4, 151);
  moe_test::Config c = with({{"num_moe_experts", 4},
                             {"moe_router_topk", 1},
                             {"moe_shared_expert_intermediate_size", 6},
                             {"moe_shared_expert_gate", true},
                             {"moe_router_topk_scaling_factor", 2.5},
                             {"moe_z_loss_coeff", 0.05}});  // top-1 softmax: the router's gradient is z's
  c.activation = "swiglu";
  gradcheck(c, 2, 3, 152);
}

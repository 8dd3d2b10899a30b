// Gradient checks of mamba.mixer (the real built plugin) in float64: the hand-written backward of
// the whole layer (pre-norm, in_proj, conv + SiLU, softplus, the chunked SSD, D, gate, grouped
// RMSNorm, out_proj) against central finite differences of its forward, for every element of the
// input and of every parameter.
//
// The checked function is L = sum(r * F(h)) with r ~ N(0, 1); the inputs are N(0, 1) and the
// parameters are drawn in the ranges training sees (mamba_test::random_params), with norm weights
// and D away from 1 so every path counts. The cases cover sequences that are and are not a
// multiple of the chunk, chunks of 1, 3, 4 and 5 tokens and one longer than the sequence (so the
// states pass through many chunk boundaries), one and several groups of heads, an explicit
// mamba_num_heads with d_conv 3, RMSNorm and LayerNorm, and both branches of the softplus.
//
// Tolerance: |analytic - numeric| <= 1e-6 |numeric| + 1e-7 per element. With a step h = 1e-6 the
// central difference has a truncation error ~ h^2 |L'''| / 6 ~ 1e-12 and a rounding error ~
// (rounding of L) / h: L is a float64 sum of terms O(1), rounded by ~1e-15, i.e. ~1e-9 on the
// quotient. A real mistake (a missing term, a wrong index or sign, a decay off by one token)
// gives errors of 1e-3 or more of gradients that are O(0.01..10) here.
#define BOOST_TEST_MODULE mamba_gradcheck
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "test_mamba_support.hpp"

namespace {

using tt::Tensor;

constexpr double kStep = 1e-6;
constexpr double kRelTol = 1e-6;
constexpr double kAbsTol = 1e-7;
const DLDataType kF64 = plx_dtype_f64();

double objective(tt::Run& run, const Tensor& r) {
  const std::vector<Tensor>& out = run.forward(true);
  double l = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(r.numel()); ++i) l += r.get(i) * out[0].get(i);
  return l;
}

std::vector<double> numeric(tt::Run& run, Tensor& t, const Tensor& r) {
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
    double largest = 0, worst_abs = 0, worst = 0;
    std::size_t failures = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double err = std::abs(a[i] - n[i]);
      largest = std::max(largest, std::abs(n[i]));
      worst_abs = std::max(worst_abs, err);
      worst = std::max(worst, err / (std::abs(n[i]) + kAbsTol / kRelTol));
      if (err > kRelTol * std::abs(n[i]) + kAbsTol && ++failures <= 5)
        BOOST_ERROR("element " << i << ": analytic " << a[i] << ", numeric " << n[i]);
    }
    BOOST_TEST_MESSAGE(what << ": " << a.size() << " elements, largest |grad| " << largest << ", worst error "
                            << worst_abs << " (relative " << worst << ")");
    BOOST_TEST(failures == 0u);
    // A gradient that is zero everywhere would pass trivially: each one here is at least 1000 times
    // the absolute tolerance.
    BOOST_TEST(largest > 1e3 * kAbsTol);
  }
}

// The softplus has a kink of ~2e-9 at 20 (log1p(exp(20)) - 20): a finite difference straddling
// it would see that jump, not the derivative. Every dt_raw + dt_bias must be clear of it.
void expect_clear_of_threshold(tt::Run& run, const mamba_test::Config& c, const std::vector<Tensor>& params,
                               const plexus::LayerInstance& layer) {
  // dt_raw = (norm(h) W_in^T)[dt rows]; recomputed here in float64 from the layer's contract.
  BOOST_TEST_REQUIRE(c.normalization == "RMSNorm");
  const Tensor& h = run.inputs[0];
  const Tensor& w_norm = params[mamba_test::param_index(layer, "norm.weight")];
  const Tensor& w_in = params[mamba_test::param_index(layer, "mixer.in_proj.weight")];
  const Tensor& bias = params[mamba_test::param_index(layer, "mixer.dt_bias")];
  const int64_t rows = h.shape[0] * h.shape[1], d = c.d_model, first = c.in_proj_rows() - c.heads();
  double nearest = 1e300;
  int64_t above = 0, below = 0;
  for (int64_t t = 0; t < rows; ++t) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i)
      ms += h.get(static_cast<std::size_t>(t * d + i)) * h.get(static_cast<std::size_t>(t * d + i));
    const double scale = 1 / std::sqrt(ms / static_cast<double>(d) + c.layernorm_epsilon);
    for (int64_t k = 0; k < c.heads(); ++k) {
      double v = bias.get(static_cast<std::size_t>(k));
      for (int64_t i = 0; i < d; ++i)
        v += h.get(static_cast<std::size_t>(t * d + i)) * scale * w_norm.get(static_cast<std::size_t>(i)) *
             w_in.get(static_cast<std::size_t>((first + k) * d + i));
      if (bias.get(static_cast<std::size_t>(k)) < 10) continue;  // a head in the training range
      nearest = std::min(nearest, std::abs(v - 20));
      (v > 20 ? above : below)++;
    }
  }
  BOOST_TEST_MESSAGE("dt_raw + dt_bias: " << above << " above 20, " << below << " at or below; nearest "
                                          << nearest);
  BOOST_TEST_REQUIRE(nearest > 1e-3);
  BOOST_TEST_REQUIRE(above > 0);
  BOOST_TEST_REQUIRE(below > 0);
}

void gradcheck(const mamba_test::Config& c, int64_t batch, int64_t seq, uint64_t seed,
               mamba_test::Dt dt = mamba_test::Dt::training) {
  mamba_test::Layer layer(c);
  std::mt19937_64 rng(seed);
  std::vector<Tensor> params = mamba_test::random_params(*layer, c, kF64, rng, dt);
  tt::Run run(*layer, {tt::random_tensor({batch, seq, c.d_model}, kF64, rng)}, params, kF64);
  if (dt == mamba_test::Dt::both_branches) expect_clear_of_threshold(run, c, params, *layer);
  run.forward(true);
  const Tensor r = tt::random_tensor(run.outputs[0].shape, kF64, rng);

  std::vector<Tensor> gi = {Tensor(run.inputs[0].shape, kF64)}, gp;
  gi[0].fill(123.0);  // written, not accumulated: the garbage must vanish
  for (const Tensor& p : run.params) gp.emplace_back(p.shape, kF64);
  std::vector<Tensor> go = {r};
  run.backward(go, gi, gp);

  compare("input 0", gi[0].values(), numeric(run, run.inputs[0], r));
  for (std::size_t p = 0; p < run.params.size(); ++p)
    compare(std::string("parameter ") + layer->param(static_cast<uint32_t>(p)).name, gp[p].values(),
            numeric(run, run.params[p], r));
}

mamba_test::Config small() {
  mamba_test::Config c;  // d_model 8, expand 2: d_inner 16, P 4: H 4, G 2, N 4
  c.d_model = 8;
  c.options = {{"mamba_state_dim", 4}, {"mamba_head_dim", 4}, {"mamba_num_groups", 2}, {"chunk_size", 4}};
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradients)

// 11 tokens in chunks of 4: two full chunks and a partial one.
BOOST_AUTO_TEST_CASE(rmsnorm_two_groups_ragged_chunks) {
  gradcheck(small(), 2, 11, 1);
}

// One group, LayerNorm, chunks of 3 (not a power of 2) over 7 tokens, H = 3 heads set explicitly
// (d_inner = 12, not expand * d_model), a convolution of width 3.
BOOST_AUTO_TEST_CASE(layernorm_one_group_explicit_heads) {
  mamba_test::Config c = small();
  c.normalization = "LayerNorm";
  c.options = {{"mamba_state_dim", 5}, {"mamba_head_dim", 4}, {"mamba_num_groups", 1},
               {"mamba_num_heads", 3}, {"d_conv", 3},         {"chunk_size", 3}};
  gradcheck(c, 1, 7, 2);
}

// dt_raw + dt_bias on both sides of softplus's threshold 20 in two of the heads (dt ~ 20: their
// state is forgotten within a token, the x terms are large); G = H = 4, 10 tokens in two chunks of 5.
BOOST_AUTO_TEST_CASE(softplus_both_branches_group_per_head) {
  mamba_test::Config c = small();
  c.options = {{"mamba_state_dim", 4}, {"mamba_head_dim", 4}, {"mamba_num_groups", 4}, {"chunk_size", 5}};
  gradcheck(c, 2, 10, 3, mamba_test::Dt::both_branches);
}

// Chunks of one token (every step crosses a chunk boundary) and one chunk longer than the
// sequence (everything within one partial chunk).
BOOST_AUTO_TEST_CASE(chunk_of_one_and_chunk_longer_than_the_sequence) {
  mamba_test::Config c = small();
  c.options["chunk_size"] = 1;
  gradcheck(c, 1, 6, 4);
  c.options["chunk_size"] = 8;
  gradcheck(c, 2, 6, 5);
}

BOOST_AUTO_TEST_SUITE_END()

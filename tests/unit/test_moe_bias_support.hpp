// Shared by the expert-bias tests (tests/unit/test_moe_expert_bias.cpp and the ranks of
// tests/mpi/test_moe_bias_ranks.cpp): a moe.layer whose routing is known in advance, so the tokens
// per expert, and so the bias's update, can be written down.
//
// E = 4 experts, top-1, RMSNorm weight 1 and the router's weight the first four unit rows: a token
// that is the unit vector of dimension j < 4 has logit sqrt(C) for expert j and 0 for the others,
// so it goes to expert j as long as no bias exceeds sqrt(C) = 2.8 (the tests' biases are at most
// a few update rates of 0.25).
#pragma once

#include <random>
#include <string>
#include <vector>

#include "test_moe_support.hpp"

namespace moe_bias_test {

using tt::Tensor;

inline moe_test::Config config(double rate) {
  moe_test::Config c;
  c.options = {{"num_moe_experts", 4},
               {"moe_router_topk", 1},
               {"moe_router_enable_expert_bias", true},
               {"moe_router_score_function", "sigmoid"},
               {"moe_router_bias_update_rate", rate}};
  return c;
}

// Random experts, a zero bias, and a router whose logit for the unit vector of dimension d is +10
// at expert d and -10 at the others: sigmoid scores 1 and 0 (to 5e-5), so a token goes to expert
// d until the bias difference of two experts nears 1.
inline std::vector<Tensor> params(const plexus::LayerInstance& layer, const moe_test::Config& c, DLDataType dtype) {
  std::mt19937_64 rng(11);
  std::vector<Tensor> p = moe_test::random_params(layer, c, dtype, rng);
  p[moe_test::param_index(layer, "pre_mlp_layernorm.weight")].fill(1.0);
  Tensor& router = p[moe_test::param_index(layer, "mlp.router.weight")];
  router.fill(0.0);
  for (int64_t e = 0; e < 4; ++e)
    for (int64_t d = 0; d < 4; ++d)
      router.set(static_cast<std::size_t>(e * c.hidden + d), e == d ? 10.0 : -10.0);
  p[moe_test::param_index(layer, "mlp.router.expert_bias")].fill(0.0);
  return p;
}

// A microbatch [1, n, C] whose token i is the unit vector of dimension experts[i].
inline Tensor tokens_to(const std::vector<int>& experts, const moe_test::Config& c, DLDataType dtype) {
  Tensor t({1, static_cast<int64_t>(experts.size()), c.hidden}, dtype);
  t.fill(0.0);
  for (std::size_t i = 0; i < experts.size(); ++i)
    t.set(i * static_cast<std::size_t>(c.hidden) + static_cast<std::size_t>(experts[i]), 1.0);
  return t;
}

// The engine's call after an optimizer step.
inline void after_step(const plexus::LayerInstance& layer, std::vector<Tensor>& params, int64_t step) {
  std::vector<DLTensor> views = tt::views(params);
  layer.after_step(step, views);
}

}  // namespace moe_bias_test

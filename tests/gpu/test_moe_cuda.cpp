// moe.layer's CUDA path against its CPU path: the layer is created twice from one config, on the
// CPU and on cuda:0, given the same float32 inputs, parameters and upstream gradient, run through
// its three stages forward (training) and backward in reverse, and its output, input gradient and
// every parameter gradient compared. Both sides compute in float32 (TF32 off on the GPU).
//
// Tolerances, max |gpu - cpu| <= tol * max |cpu| over each tensor (relative to the tensor's own
// scale: the relative error of elements near zero means nothing): 2e-5 for the output, 2e-4 for
// the input and parameter gradients. Why: integration.test_moe_parity holds the CPU's float32 to
// 1e-5 (output) and 1e-4 (gradients) of the exact float64 result; the GPU computes the same
// decomposition in float32 with other summation orders (cuBLAS against OpenBLAS, block
// reductions against the CPU's loops), CUDA's expf/logf/erff against glibc's (both within a few
// float ulp) and fused multiply-adds; held to the same bars, the two differ by at most twice
// them. The routing is the same on both sides only when no token's k-th and (k+1)-th selection
// scores are within rounding of each other, so inputs with a gap below 1e-3 are redrawn. A wrong
// index, a lost term, a wrong expert or an overwritten accumulation is off by order 1.
//
// Parameter gradients start from non-zero values on both sides and their increments are
// compared, so overwriting instead of accumulating fails; the GPU's input gradient starts as NaN,
// so an element left unwritten fails.
//
// Cases: top-1 and top-2, softmax after and before the top-k, sigmoid with k = 1 and 2, GeLU and
// SwiGLU, RMSNorm and LayerNorm, shared experts, the aux and z-losses with a loss scale of 0.25,
// the expert bias in the selection, experts that receive no token, a capacity dropping by
// probability and by position, group-limited routing (softmax before and after the top-k,
// sigmoid); after_step's update of the expert bias on the device; two runs bit-identical; two
// microbatches with interleaved stages; the refusals (float64, a tensor on the CPU).
//
// Without a CUDA device (or in a build without CUDA) the module reports itself skipped (77).
#define BOOST_TEST_MODULE moe_cuda
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../unit/test_moe_support.hpp"
#include "gpu_layer_calls.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/engine/tensor.hpp"
#include "skip_module.hpp"

PLEXUS_SKIP_MODULE_UNLESS(plexus::device::cuda_device_count() > 0,
                          "no CUDA GPU here (or a build without CUDA): moe.layer's CUDA path needs one")

namespace {

using namespace gpu_test;
using moe_test::Config;
using Tensor = tt::Tensor;

constexpr double kOutputTol = 2e-5, kGradTol = 2e-4;
// The smallest gap between a token's k-th and (k+1)-th selection score the comparison accepts.
constexpr double kRoutingMargin = 1e-3;
constexpr double kLossScale = 0.25;

Config config(int64_t experts, int64_t topk, boost::json::object extra = {}) {
  Config c;
  c.hidden = 16;
  c.ffn = 12;
  c.options = std::move(extra);
  c.options["num_moe_experts"] = experts;
  c.options["moe_router_topk"] = topk;
  return c;
}

struct Result {
  std::vector<double> out, dx;
  std::vector<std::vector<double>> grads;
};

Result run_cpu(const plexus::LayerInstance& layer, const std::vector<Tensor>& params, const Tensor& x,
               const Tensor& dy, const std::vector<Tensor>& before) {
  tt::Run run(layer, {x}, params, kF32);
  run.forward();
  std::vector<Tensor> go = {dy}, gi = {Tensor(x.shape, kF32)}, pg = before;
  run.backward(go, gi, pg, kLossScale);
  Result r{run.outputs[0].values(), gi[0].values(), {}};
  for (const Tensor& g : pg) r.grads.push_back(g.values());
  return r;
}

Result run_gpu(const plexus::LayerInstance& layer, const std::vector<Tensor>& params, const Tensor& x,
               const Tensor& dy, const std::vector<Tensor>& before) {
  DeviceRun run(layer, tensors(upload(x)), upload_all(params));
  run.forward_all_stages();
  Tensor nan(x.shape, kF32);
  nan.fill(std::nan(""));
  std::vector<plexus::Tensor> go = tensors(upload(dy)), gi = tensors(upload(nan)), pg = upload_all(before);
  run.backward_all_stages(go, gi, pg, kLossScale);
  Result r{download(run.outputs[0]), download(gi[0]), {}};
  for (const plexus::Tensor& g : pg) r.grads.push_back(download(g));
  return r;
}

// The smallest gap between a token's k-th and (k+1)-th selection score: the logits, or with the
// expert bias (sigmoid scores only) sigmoid(logit) + bias.
double selection_margin(const Config& c, const plexus::LayerInstance& layer, const Tensor& x,
                        const std::vector<Tensor>& params) {
  std::vector<double> z = moe_test::logits(c, layer, x, params);
  const auto* bias = c.options.if_contains("moe_router_enable_expert_bias");
  if (bias != nullptr && bias->as_bool()) {
    const Tensor& b = params[tt::param_index(layer, "mlp.router.expert_bias")];
    for (std::size_t i = 0; i < z.size(); ++i)
      z[i] = 1 / (1 + std::exp(-z[i])) + b.get(i % static_cast<std::size_t>(c.experts()));
  }
  return std::min(moe_test::routing_margin(z, c.experts(), c.topk()), moe_test::group_margin(c, z));
}

// The config on the CPU and on cuda:0 over [batch, seq, hidden], compared; returns the GPU's
// result (for the determinism check).
Result compare(const Config& c, int64_t batch, int64_t seq, uint64_t seed, const std::string& what) {
  BOOST_TEST_MESSAGE("case: " << what);
  moe_test::Layer cpu(c), gpu(c, kGpu);
  std::mt19937_64 rng(seed);
  const std::vector<Tensor> params = moe_test::random_params(*cpu, c, kF32, rng);
  Tensor x = tt::random_tensor({batch, seq, c.hidden}, kF32, rng);
  for (int tries = 0; selection_margin(c, *cpu, x, params) < kRoutingMargin; ++tries) {
    BOOST_TEST_REQUIRE(tries < 50, what << ": no input without a near-tie in the routing");
    x = tt::random_tensor({batch, seq, c.hidden}, kF32, rng);
  }
  const Tensor dy = tt::random_tensor({batch, seq, c.hidden}, kF32, rng);
  // Starting gradients U(-0.5, 0.5): of the order of the gradients themselves.
  std::vector<Tensor> before;
  std::uniform_real_distribution<double> uniform(-0.5, 0.5);
  for (const Tensor& p : params) {
    Tensor g(p.shape, kF32);
    for (std::size_t k = 0; k < static_cast<std::size_t>(g.numel()); ++k) g.set(k, uniform(rng));
    before.push_back(std::move(g));
  }
  const Result want = run_cpu(*cpu, params, x, dy, before);
  const Result got = run_gpu(*gpu, params, x, dy, before);
  expect_close(got.out, want.out, kOutputTol, what + ": output");
  expect_close(got.dx, want.dx, kGradTol, what + ": grad input");
  for (std::size_t i = 0; i < before.size(); ++i) {
    const std::vector<double> start = before[i].values();
    expect_close(minus(got.grads[i], start), minus(want.grads[i], start), kGradTol,
                 what + ": gradient of " + cpu->param(static_cast<uint32_t>(i)).name);
  }
  return got;
}

}  // namespace

BOOST_AUTO_TEST_CASE(softmax_routing_matches_the_cpu) {
  compare(config(4, 2), 2, 9, 1, "top-2 softmax, gelu, RMSNorm");
  compare(config(4, 1), 2, 9, 2, "top-1 softmax");
  compare(config(6, 2, {{"moe_router_pre_softmax", true}}), 2, 9, 3, "top-2, softmax before the top-k");
  compare(config(5, 5), 1, 7, 4, "k = E");
}

BOOST_AUTO_TEST_CASE(sigmoid_routing_matches_the_cpu) {
  compare(config(4, 2, {{"moe_router_score_function", "sigmoid"}}), 2, 9, 5, "top-2 sigmoid");
  compare(config(4, 1, {{"moe_router_score_function", "sigmoid"}}), 2, 9, 6, "top-1 sigmoid");
}

BOOST_AUTO_TEST_CASE(swiglu_layernorm_and_shared_experts_match_the_cpu) {
  Config c = config(4, 2);
  c.activation = "swiglu";
  c.normalization = "LayerNorm";
  compare(c, 2, 9, 7, "swiglu, LayerNorm");
  compare(config(4, 2, {{"moe_shared_expert_intermediate_size", 10}}), 2, 9, 8, "shared experts, gelu");
  c.options["moe_shared_expert_intermediate_size"] = 10;
  compare(c, 2, 9, 9, "shared experts, swiglu, LayerNorm");
}

BOOST_AUTO_TEST_CASE(the_auxiliary_losses_gradients_match_the_cpu) {
  compare(config(4, 2, {{"moe_aux_loss_coeff", 0.1}, {"moe_z_loss_coeff", 0.01}}), 2, 9, 10,
          "aux and z-loss, softmax");
  compare(config(4, 2,
                 {{"moe_aux_loss_coeff", 0.1},
                  {"moe_z_loss_coeff", 0.01},
                  {"moe_router_score_function", "sigmoid"}}),
          2, 9, 11, "aux and z-loss, sigmoid k = 2");
  compare(config(4, 1, {{"moe_aux_loss_coeff", 0.1}, {"moe_router_score_function", "sigmoid"}}), 2, 9, 12,
          "aux loss, sigmoid k = 1");
}

BOOST_AUTO_TEST_CASE(the_topk_scaling_factor_as_on_the_cpu) {
  compare(config(6, 2, {{"moe_router_topk_scaling_factor", 2.5}}), 2, 9, 14, "top-k scaling 2.5, softmax");
  compare(config(6, 2, {{"moe_router_topk_scaling_factor", 2.5}, {"moe_router_score_function", "sigmoid"}}),
          2, 9, 15, "top-k scaling 2.5, sigmoid");
}

BOOST_AUTO_TEST_CASE(the_expert_bias_steers_the_choice_as_on_the_cpu) {
  compare(config(6, 2, {{"moe_router_enable_expert_bias", true}, {"moe_router_score_function", "sigmoid"}}),
          2, 9, 13, "expert bias, sigmoid");
}

BOOST_AUTO_TEST_CASE(experts_without_tokens_and_many_tokens) {
  compare(config(8, 1), 1, 3, 14, "3 tokens over 8 experts");
  compare(config(8, 2, {{"moe_aux_loss_coeff", 0.1}}), 4, 300, 15,
          "1200 tokens, more pairs than the sort's workers");
}

// Capacities that drop pairs (with 2 x 9 tokens over 4 experts, factor 0.5 keeps 5 of each
// expert's pairs). By probability a drop depends on the probabilities' order within an expert: a
// near-tie there could order the two sides differently, a risk of about 1e-5 per pair at these
// sizes, taken with fixed seeds.
BOOST_AUTO_TEST_CASE(a_capacity_drops_the_same_pairs_as_on_the_cpu) {
  compare(config(4, 2, {{"moe_expert_capacity_factor", 0.5}}), 2, 9, 18, "capacity 0.5 by probability");
  compare(config(4, 2, {{"moe_expert_capacity_factor", 0.5}, {"moe_token_drop_policy", "position"}}), 2, 9,
          19, "capacity 0.5 by position");
  compare(config(4, 1,
                 {{"moe_expert_capacity_factor", 1.0},
                  {"moe_shared_expert_intermediate_size", 10},
                  {"moe_aux_loss_coeff", 0.1}}),
          2, 9, 20, "capacity 1.0, top-1, shared experts, aux loss");
  compare(config(8, 2, {{"moe_expert_capacity_factor", 1.25}}), 4, 300, 21, "capacity 1.25, 1200 tokens");
}

// Group-limited routing: 8 experts in 4 groups, a token's choice among its 2 best groups (the
// groups change some token's choice at these sizes; the margin check covers the group choice).
BOOST_AUTO_TEST_CASE(group_limited_routing_matches_the_cpu) {
  const boost::json::object groups = {{"moe_router_num_groups", 4}, {"moe_router_group_topk", 2}};
  boost::json::object sigmoid = groups, pre = groups;
  sigmoid["moe_router_score_function"] = "sigmoid";
  pre["moe_router_pre_softmax"] = true;
  compare(config(8, 2, groups), 2, 9, 22, "groups, softmax");
  compare(config(8, 4, sigmoid), 2, 9, 23, "groups, sigmoid, k = 4");
  compare(config(8, 2, pre), 2, 9, 24, "groups, softmax before the top-k");
}

BOOST_AUTO_TEST_CASE(two_runs_are_bit_identical) {
  const Config c = config(8, 2, {{"moe_aux_loss_coeff", 0.1}, {"moe_shared_expert_intermediate_size", 10}});
  const Result a = compare(c, 4, 100, 16, "determinism, first run");
  const Result b = compare(c, 4, 100, 16, "determinism, second run");
  expect_close(a.out, b.out, 0, "output of two runs");
  expect_close(a.dx, b.dx, 0, "grad input of two runs");
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    expect_close(a.grads[i], b.grads[i], 0, "a gradient of two runs");
}

// After a step the bias moves on the GPU as on the CPU (the same counts, so the same signs):
// after_step sums the counts (through a device buffer where there is a dp group) and updates the
// device's bias in a host copy.
BOOST_AUTO_TEST_CASE(after_step_moves_the_device_bias_as_on_the_cpu) {
  const Config c =
      config(6, 2, {{"moe_router_enable_expert_bias", true}, {"moe_router_score_function", "sigmoid"}});
  moe_test::Layer cpu(c), gpu(c, kGpu);
  std::mt19937_64 rng(26);
  std::vector<Tensor> params = moe_test::random_params(*cpu, c, kF32, rng);
  Tensor x = tt::random_tensor({2, 9, c.hidden}, kF32, rng);
  for (int tries = 0; selection_margin(c, *cpu, x, params) < kRoutingMargin; ++tries) {
    BOOST_TEST_REQUIRE(tries < 50, "no input without a near-tie in the routing");
    x = tt::random_tensor({2, 9, c.hidden}, kF32, rng);
  }
  const std::size_t bias = tt::param_index(*cpu, "mlp.router.expert_bias");
  const std::vector<double> start = params[bias].values();
  DeviceRun run(*gpu, tensors(upload(x)), upload_all(params));
  run.forward_all_stages();
  std::vector<DLTensor> device_views = views(run.params);
  gpu->after_step(0, device_views);
  tt::Run host(*cpu, {x}, params, kF32);
  host.forward();
  std::vector<DLTensor> host_views = tt::views(host.params);
  cpu->after_step(0, host_views);
  const std::vector<double> want = host.params[bias].values(), got = download(run.params[bias]);
  expect_close(got, want, 0, "the expert bias after a step");
  BOOST_TEST(minus(want, start) != std::vector<double>(start.size(), 0.0), "the bias moved");
}

// Two microbatches of one layer with their stages interleaved (as a pipeline schedule runs them):
// each gives bit for bit what it gives alone, so everything a stage needs lives in its state.
BOOST_AUTO_TEST_CASE(interleaved_microbatches_keep_their_own_state) {
  const Config c = config(4, 2,
                          {{"moe_aux_loss_coeff", 0.1},
                           {"moe_shared_expert_intermediate_size", 10},
                           {"moe_expert_capacity_factor", 1.0}});
  moe_test::Layer gpu(c, kGpu);
  std::mt19937_64 rng(25);
  const std::vector<Tensor> params = moe_test::random_params(*gpu, c, kF32, rng);
  const Tensor xa = tt::random_tensor({2, 7, c.hidden}, kF32, rng),
               xb = tt::random_tensor({1, 5, c.hidden}, kF32, rng);
  const Tensor dya = tt::random_tensor({2, 7, c.hidden}, kF32, rng),
               dyb = tt::random_tensor({1, 5, c.hidden}, kF32, rng);
  std::vector<Tensor> zero;
  for (const Tensor& p : params) zero.emplace_back(p.shape, kF32);
  const Result alone_a = run_gpu(*gpu, params, xa, dya, zero), alone_b = run_gpu(*gpu, params, xb, dyb, zero);

  DeviceRun a(*gpu, tensors(upload(xa)), upload_all(params));
  DeviceRun b(*gpu, tensors(upload(xb)), upload_all(params));
  const uint32_t stages = gpu->info().num_stages;
  for (uint32_t stage = 0; stage < stages; ++stage) {
    a.forward_stage(stage);
    b.forward_stage(stage);
  }
  std::vector<plexus::Tensor> goa = tensors(upload(dya)), gia = tensors(upload(Tensor(xa.shape, kF32))),
                              pga = upload_all(zero);
  std::vector<plexus::Tensor> gob = tensors(upload(dyb)), gib = tensors(upload(Tensor(xb.shape, kF32))),
                              pgb = upload_all(zero);
  for (uint32_t stage = stages; stage-- > 0;) {
    b.backward_stage(stage, gob, {}, gib, {}, pgb, kLossScale);
    a.backward_stage(stage, goa, {}, gia, {}, pga, kLossScale);
  }
  expect_close(download(a.outputs[0]), alone_a.out, 0, "microbatch a: output");
  expect_close(download(b.outputs[0]), alone_b.out, 0, "microbatch b: output");
  expect_close(download(gia[0]), alone_a.dx, 0, "microbatch a: grad input");
  expect_close(download(gib[0]), alone_b.dx, 0, "microbatch b: grad input");
  for (std::size_t i = 0; i < params.size(); ++i) {
    expect_close(download(pga[i]), alone_a.grads[i], 0, "microbatch a: a gradient");
    expect_close(download(pgb[i]), alone_b.grads[i], 0, "microbatch b: a gradient");
  }
}

BOOST_AUTO_TEST_CASE(what_the_cuda_path_does_not_take_is_refused) {
  const Config c = config(4, 2);
  moe_test::Layer gpu(c, kGpu);
  std::mt19937_64 rng(17);
  const std::vector<Tensor> params = moe_test::random_params(*gpu, c, kF32, rng);
  const Tensor x = tt::random_tensor({1, 3, c.hidden}, kF32, rng);
  // A tensor on the CPU.
  const std::string on_cpu = forward_error(*gpu, tensors(upload(x, kCpu)), upload_all(params));
  BOOST_TEST(tt::mentions(on_cpu, "input 0"), on_cpu);
  // float64.
  const std::vector<Tensor> params64 = moe_test::random_params(*gpu, c, plx_dtype_f64(), rng);
  std::vector<plexus::Tensor> p64;
  for (const Tensor& p : params64) {
    plexus::Tensor host(p.shape, plx_dtype_f64());
    for (std::size_t i = 0; i < static_cast<std::size_t>(host.numel()); ++i)
      host.data<double>()[i] = p.get(i);
    p64.push_back(host.to(kGpu));
  }
  plexus::Tensor x64({1, 3, c.hidden}, plx_dtype_f64());
  for (std::size_t i = 0; i < static_cast<std::size_t>(x64.numel()); ++i) x64.data<double>()[i] = x.get(i);
  const std::string f64 = forward_error(*gpu, tensors(x64.to(kGpu)), std::move(p64));
  BOOST_TEST((tt::mentions(f64, "float64") && tt::mentions(f64, "not built yet")), f64);
}

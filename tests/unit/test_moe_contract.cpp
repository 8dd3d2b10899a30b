// The contract of moe.layer (the real built plugin) apart from its arithmetic: what it declares
// (parameters with Megatron's names, shared experts included, three compute stages), the
// refusals of bad options (top-k > experts, experts < 1, capacity <= 0, unknown score function or
// drop policy, inconsistent groups) and of
// devices and calls it does not support, each naming the option or the call, and that the
// loss scale of a backward reaches the auxiliary losses' gradients only.
#define BOOST_TEST_MODULE moe_contract
#include <boost/test/unit_test.hpp>

#include <random>
#include <string>
#include <vector>

#include "plexus/core/device.hpp"
#include "test_moe_support.hpp"

namespace {

using tt::Tensor;

moe_test::Config with(boost::json::object options) {
  moe_test::Config c;
  c.options = std::move(options);
  return c;
}

std::string refusal(const moe_test::Config& c, DLDevice device = DLDevice{kDLCPU, 0}) {
  return tt::error_of([&] { moe_test::Layer layer(c, device); });
}

}  // namespace

BOOST_AUTO_TEST_CASE(declares_megatrons_names_and_three_stages) {
  moe_test::Config c = with({{"num_moe_experts", 3}, {"moe_router_topk", 2}});
  c.activation = "swiglu";
  c.normalization = "LayerNorm";
  moe_test::Layer layer(c);
  const plx_layer_info info = layer->info();
  BOOST_TEST(info.num_stages == 3u);
  BOOST_TEST(info.num_inputs == 1u);
  BOOST_TEST(info.num_outputs == 1u);
  std::vector<std::string> names;
  for (uint32_t i = 0; i < info.num_params; ++i) names.emplace_back(layer->param(i).name);
  const std::vector<std::string> expected = {
      "pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias", "mlp.router.weight",
      "mlp.experts.local_experts.0.linear_fc1.weight", "mlp.experts.local_experts.0.linear_fc2.weight",
      "mlp.experts.local_experts.1.linear_fc1.weight", "mlp.experts.local_experts.1.linear_fc2.weight",
      "mlp.experts.local_experts.2.linear_fc1.weight", "mlp.experts.local_experts.2.linear_fc2.weight"};
  BOOST_TEST(names == expected, boost::test_tools::per_element());
  const plx_param_spec fc1 = layer->param(3);
  BOOST_TEST(fc1.desc.dims[0] == 2 * c.ffn);  // swiglu: [gate; up]
  BOOST_TEST(fc1.desc.dims[1] == c.hidden);
  BOOST_TEST(layer->param(2).desc.dims[0] == 3);
  for (uint32_t s = 0; s < 3; ++s) BOOST_TEST(layer->stage(s).kind == uint32_t{PLX_STAGE_COMPUTE});
  BOOST_TEST(std::string(layer->stage(0).name) == "route");
  BOOST_TEST(std::string(layer->stage(1).name) == "experts");
  BOOST_TEST(std::string(layer->stage(2).name) == "unpermute");
}

// Megatron's Transformer Engine spelling: an MoE layer keeps its pre_mlp_layernorm (TENorm, not
// fused into a linear_fc1), and with moe_grouped_gemm the experts are TEGroupedMLP's
// mlp.experts.linear_fc<n>.weight<i>; without it SequentialMLP's local names in both spellings.
BOOST_AUTO_TEST_CASE(transformer_engine_names) {
  const auto te_of = [](const plx_param_spec& p) {
    return std::string(p.te_name != nullptr && *p.te_name != '\0' ? p.te_name : p.name);
  };
  moe_test::Config c = with({{"num_moe_experts", 3}, {"moe_router_topk", 2}});
  c.normalization = "LayerNorm";
  moe_test::Layer plain(c);
  for (uint32_t i = 0; i < plain->info().num_params; ++i)
    BOOST_TEST(te_of(plain->param(i)) == std::string(plain->param(i).name));
  c.options["moe_grouped_gemm"] = true;
  moe_test::Layer grouped(c);
  std::vector<std::string> te;
  for (uint32_t i = 0; i < grouped->info().num_params; ++i) te.push_back(te_of(grouped->param(i)));
  const std::vector<std::string> expected = {
      "pre_mlp_layernorm.weight",       "pre_mlp_layernorm.bias",         "mlp.router.weight",
      "mlp.experts.linear_fc1.weight0", "mlp.experts.linear_fc2.weight0", "mlp.experts.linear_fc1.weight1",
      "mlp.experts.linear_fc2.weight1", "mlp.experts.linear_fc1.weight2", "mlp.experts.linear_fc2.weight2"};
  BOOST_TEST(te == expected, boost::test_tools::per_element());
  BOOST_TEST(std::string(grouped->param(3).name) == "mlp.experts.local_experts.0.linear_fc1.weight");
}

BOOST_AUTO_TEST_CASE(moe_ffn_hidden_size_overrides_the_models) {
  moe_test::Layer layer(with({{"num_moe_experts", 2}, {"moe_router_topk", 1}, {"moe_ffn_hidden_size", 5}}));
  BOOST_TEST(layer->param(2).desc.dims[0] == 5);  // expert 0's fc1: [F, C]
}

BOOST_AUTO_TEST_CASE(bad_options_are_refused_naming_the_option) {
  const std::string topk = refusal(with({{"num_moe_experts", 4}, {"moe_router_topk", 5}}));
  BOOST_TEST(tt::mentions(topk, "moe_router_topk (5) must not exceed num_moe_experts (4)"), topk);
  const std::string experts = refusal(with({{"num_moe_experts", 0}, {"moe_router_topk", 1}}));
  BOOST_TEST(tt::mentions(experts, "num_moe_experts must be at least 1, got 0"), experts);
  const std::string k0 = refusal(with({{"num_moe_experts", 2}, {"moe_router_topk", 0}}));
  BOOST_TEST(tt::mentions(k0, "moe_router_topk must be at least 1, got 0"), k0);
  const std::string score =
      refusal(with({{"num_moe_experts", 2}, {"moe_router_topk", 1}, {"moe_router_score_function", "sinkhorn"}}));
  BOOST_TEST(tt::mentions(score, "moe_router_score_function must be \"softmax\" or \"sigmoid\", got \"sinkhorn\""),
             score);
  const std::string coeff = refusal(with({{"num_moe_experts", 2}, {"moe_router_topk", 1}, {"moe_aux_loss_coeff", -1}}));
  BOOST_TEST(tt::mentions(coeff, "moe_aux_loss_coeff must be a finite number >= 0"), coeff);
  const std::string pre = refusal(with({{"num_moe_experts", 2}, {"moe_router_topk", 1},
                                        {"moe_router_score_function", "sigmoid"}, {"moe_router_pre_softmax", true}}));
  BOOST_TEST(tt::mentions(pre, "moe_router_pre_softmax"), pre);
  for (const double factor : {0.0, -1.0}) {
    const std::string capacity =
        refusal(with({{"num_moe_experts", 2}, {"moe_router_topk", 1}, {"moe_expert_capacity_factor", factor}}));
    BOOST_TEST(tt::mentions(capacity, "moe_expert_capacity_factor must be a finite number > 0"), capacity);
  }
  const std::string policy =
      refusal(with({{"num_moe_experts", 2}, {"moe_router_topk", 1}, {"moe_token_drop_policy", "random"}}));
  BOOST_TEST(tt::mentions(policy, "moe_token_drop_policy must be \"probs\" or \"position\", got \"random\""), policy);
  const std::string divide = refusal(with({{"num_moe_experts", 6}, {"moe_router_topk", 2},
                                           {"moe_router_num_groups", 4}, {"moe_router_group_topk", 1}}));
  BOOST_TEST(tt::mentions(divide, "moe_router_num_groups (4) must divide num_moe_experts (6)"), divide);
  const std::string alone = refusal(with({{"num_moe_experts", 6}, {"moe_router_topk", 2}, {"moe_router_num_groups", 3}}));
  BOOST_TEST(tt::mentions(alone, "moe_router_group_topk must be set too"), alone);
  const std::string few = refusal(with({{"num_moe_experts", 6}, {"moe_router_topk", 3},
                                        {"moe_router_num_groups", 3}, {"moe_router_group_topk", 1}}));
  BOOST_TEST(tt::mentions(few, "moe_router_topk (3) must be between moe_router_group_topk (1) and the experts of the "
                               "chosen groups (2)"),
             few);
  for (const double factor : {0.0, -2.5}) {
    const std::string scaling = refusal(
        with({{"num_moe_experts", 2}, {"moe_router_topk", 1}, {"moe_router_topk_scaling_factor", factor}}));
    BOOST_TEST(tt::mentions(scaling, "moe_router_topk_scaling_factor must be a finite number > 0"), scaling);
  }
  const std::string gate =
      refusal(with({{"num_moe_experts", 2}, {"moe_router_topk", 1}, {"moe_shared_expert_gate", true}}));
  BOOST_TEST(tt::mentions(gate, "moe_shared_expert_gate needs a shared expert"), gate);
}

BOOST_AUTO_TEST_CASE(shared_experts_have_megatrons_names) {
  moe_test::Layer layer(
      with({{"num_moe_experts", 2}, {"moe_router_topk", 1}, {"moe_shared_expert_intermediate_size", 7}}));
  const uint32_t n = layer->info().num_params;
  BOOST_TEST_REQUIRE(n == 8u);  // norm, router, 2 x 2 experts, 2 shared
  BOOST_TEST(std::string(layer->param(n - 2).name) == "mlp.shared_experts.linear_fc1.weight");
  BOOST_TEST(std::string(layer->param(n - 1).name) == "mlp.shared_experts.linear_fc2.weight");
  BOOST_TEST(layer->param(n - 2).desc.dims[0] == 7);
  BOOST_TEST(layer->param(n - 1).desc.dims[1] == 7);
  // With Megatron's shared expert gate: mlp.shared_experts.gate_weight [1, C] after them.
  moe_test::Config gated = with({{"num_moe_experts", 2},
                                 {"moe_router_topk", 1},
                                 {"moe_shared_expert_intermediate_size", 7},
                                 {"moe_shared_expert_gate", true}});
  moe_test::Layer with_gate(gated);
  BOOST_TEST_REQUIRE(with_gate->info().num_params == 9u);
  const plx_param_spec g = with_gate->param(8);
  BOOST_TEST(std::string(g.name) == "mlp.shared_experts.gate_weight");
  BOOST_TEST(g.desc.ndim == 2);
  BOOST_TEST(g.desc.dims[0] == 1);
  BOOST_TEST(g.desc.dims[1] == gated.hidden);
}

// A CUDA device this process does not have: refused by a build without CUDA, or by the CUDA path
// that finds no such device; either names it. Another device type is refused naming its number.
BOOST_AUTO_TEST_CASE(a_device_it_cannot_use_is_refused) {
  const int count = plexus::device::cuda_device_count();
  const std::string cuda = refusal(moe_test::Config{}, DLDevice{kDLCUDA, count});
  BOOST_TEST((tt::mentions(cuda, "unsupported") && tt::mentions(cuda, "cuda:" + std::to_string(count)) &&
              (tt::mentions(cuda, "built without CUDA") || tt::mentions(cuda, "CUDA device(s)"))),
             cuda);
  const std::string rocm = refusal(moe_test::Config{}, DLDevice{kDLROCM, 0});
  BOOST_TEST((tt::mentions(rocm, "runs on the CPU") &&
              tt::mentions(rocm, "device type " + std::to_string(static_cast<int>(kDLROCM)))),
             rocm);
}

BOOST_AUTO_TEST_CASE(stages_run_in_order) {
  const moe_test::Config c;
  moe_test::Layer layer(c);
  std::mt19937_64 rng(3);
  std::vector<Tensor> params = moe_test::random_params(*layer, c, plx_dtype_f64(), rng);
  std::vector<Tensor> in = {tt::random_tensor({1, 3, c.hidden}, plx_dtype_f64(), rng)};
  std::vector<Tensor> out = {Tensor({1, 3, c.hidden}, plx_dtype_f64())};
  auto state = layer->create_state(0);
  std::vector<DLTensor> iv = tt::views(in), ov = tt::views(out), pv = tt::views(params);
  plx_forward_args args{};
  args.struct_size = sizeof(args);
  args.flags = PLX_FORWARD_TRAINING;
  args.num_inputs = 1;
  args.inputs = iv.data();
  args.num_outputs = 1;
  args.outputs = ov.data();
  args.num_params = static_cast<uint32_t>(pv.size());
  args.params = pv.data();
  const std::string early = tt::error_of([&] { layer->forward(*state, 1, args); });
  BOOST_TEST(tt::mentions(early, "forward stage 1 called before stage 0"), early);
  const std::string missing = tt::error_of([&] { layer->forward(*state, 3, args); });
  BOOST_TEST(tt::mentions(missing, "no stage 3"), missing);
}

// The loss scale multiplies the auxiliary losses' gradients and nothing else: with both losses
// off, a backward with scale 0.1 gives the same gradients as one with scale 1, bit for bit; with
// the aux loss on, the router's gradients of the two differ.
BOOST_AUTO_TEST_CASE(the_loss_scale_scales_only_the_auxiliary_gradients) {
  for (const bool aux : {false, true}) {
    moe_test::Config c = with({{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_aux_loss_coeff", aux ? 0.5 : 0.0}});
    moe_test::Layer layer(c);
    std::mt19937_64 rng(5);
    std::vector<Tensor> params = moe_test::random_params(*layer, c, plx_dtype_f64(), rng);
    const Tensor h = tt::random_tensor({2, 4, c.hidden}, plx_dtype_f64(), rng);
    const Tensor dy = tt::random_tensor({2, 4, c.hidden}, plx_dtype_f64(), rng);
    std::vector<std::vector<double>> router_grads;
    for (const double scale : {1.0, 0.1}) {
      moe_test::Run run(*layer, {h}, params, plx_dtype_f64());
      run.forward(true);
      std::vector<Tensor> go = {dy}, gi = {Tensor(h.shape, plx_dtype_f64())}, gp;
      for (const Tensor& p : params) gp.emplace_back(p.shape, plx_dtype_f64());
      run.backward(go, gi, gp, scale);
      router_grads.push_back(gp[moe_test::param_index(*layer, "mlp.router.weight")].values());
    }
    if (aux)
      BOOST_TEST(router_grads[0] != router_grads[1]);
    else
      BOOST_TEST(router_grads[0] == router_grads[1], boost::test_tools::per_element());
  }
}

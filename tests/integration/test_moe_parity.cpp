// Parity of moe.layer (the real built plugin) with a PyTorch reference of the whole layer
// (tests/reference/moe_reference.py: written from the layer's contract in another form, every
// expert on every token weighted by a dense combine matrix instead of a permutation; gradients by
// autograd, in float64; run with the system python and Debian's python3-torch). Random inputs,
// parameters and upstream gradients per case, handed over as one safetensors file; the output,
// the aux and z-loss values, the input gradient and every parameter gradient are compared. The
// reference's objective is sum(grad_output * F) + loss_scale (aux + z), so the router's
// gradients include the auxiliary losses' scaled by the loss scale given to backward.
//
// Cases: softmax after top-k (gelu, RMSNorm) and before (swiglu, LayerNorm), sigmoid with k = 2
// and k = 1, top-1 softmax, 8 experts with k = 2, a capacity dropping by probability and by
// position, shared experts (swiglu), group-limited routing (softmax after and before the top-k,
// sigmoid), each in float64 and float32. The float32
// cases compute the layer in float32 against the float64 reference of the same (float32) values.
// Routing must not differ between the two: a token whose k-th and (k+1)-th logits are within
// 1e-4 of each other could choose differently under float32 rounding (and so could an expert
// over capacity at its last kept probability), so each case's draw is redrawn until every such
// gap exceeds 1e-3 (the gradcheck's rule).
//
// Error measure, per tensor: max |ours - ref| / max |ref|. Bars:
//  - float64: forward 1e-10, gradients 1e-8 (rounding only; both sides are float64 with
//    different association);
//  - float32: forward 1e-5, gradients 1e-4 (float32 rounds at 6e-8 per operation; the sums here
//    have tens of terms, and the gradients pass through the norm's division and the softmax).
// Reported skipped by ctest (exit 77), not passed, where /usr/bin/python3 cannot import torch.
#define BOOST_TEST_MODULE moe_parity
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../unit/test_moe_support.hpp"
#include "plexus/core/checkpoint/safetensors.hpp"
#include "run_process.hpp"
#include "skip_module.hpp"
#include "temp_dir.hpp"

namespace {

namespace ck = plexus::checkpoint;
using tt::Tensor;

const std::string kPython = "/usr/bin/python3";
constexpr double kLossScale = 0.5;

bool torch_available() { return plexus::test::run_process(kPython + " -c 'import torch'").status == 0; }

struct Case {
  std::string name;
  moe_test::Config config;
  int64_t batch = 2, seq = 12;
  DLDataType dtype = plx_dtype_f64();

  bool f64() const { return plx_dtype_equal(dtype, plx_dtype_f64()); }
  boost::json::object json() const {
    const moe_test::Config& c = config;
    return {{"name", name},
            {"experts", c.experts()},
            {"topk", c.topk()},
            {"normalization", c.normalization},
            {"layernorm_epsilon", c.layernorm_epsilon},
            {"activation", c.activation},
            {"score", c.score()},
            {"pre_softmax", c.pre_softmax()},
            {"aux_loss_coeff", c.coeff("moe_aux_loss_coeff")},
            {"z_loss_coeff", c.coeff("moe_z_loss_coeff")},
            {"loss_scale", kLossScale},
            {"capacity_factor", c.coeff("moe_expert_capacity_factor")},
            {"drop_policy", c.options.contains("moe_token_drop_policy") ? c.options.at("moe_token_drop_policy")
                                                                        : boost::json::value("probs")},
            {"shared", c.options.contains("moe_shared_expert_intermediate_size")},
            {"num_groups", moe_test::option(c, "moe_router_num_groups")},
            {"group_topk", moe_test::option(c, "moe_router_group_topk")},
            {"topk_scaling_factor", c.options.contains("moe_router_topk_scaling_factor")
                                        ? c.options.at("moe_router_topk_scaling_factor").to_number<double>()
                                        : 1.0},
            {"shared_gate", c.options.contains("moe_shared_expert_gate")}};
  }
};

std::vector<Case> cases() {
  std::vector<Case> all;
  const auto add = [&](std::string name, moe_test::Config c, int64_t batch, int64_t seq) {
    all.push_back(Case{"f64_" + name, c, batch, seq, plx_dtype_f64()});
    all.push_back(Case{"f32_" + name, c, batch, seq, plx_dtype_f32()});
  };
  moe_test::Config post;
  post.hidden = 16;
  post.ffn = 12;
  post.options = {{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_aux_loss_coeff", 0.1},
                  {"moe_z_loss_coeff", 0.01}};
  add("softmax_top2_gelu_rmsnorm", post, 2, 12);
  moe_test::Config pre = post;
  pre.normalization = "LayerNorm";
  pre.activation = "swiglu";
  pre.options = {{"num_moe_experts", 6}, {"moe_router_topk", 3}, {"moe_router_pre_softmax", true},
                 {"moe_aux_loss_coeff", 0.1}, {"moe_z_loss_coeff", 0.01}};
  add("pre_softmax_top3_swiglu_layernorm", pre, 2, 9);
  moe_test::Config sigmoid = post;
  sigmoid.options = {{"num_moe_experts", 5}, {"moe_router_topk", 2}, {"moe_router_score_function", "sigmoid"},
                     {"moe_aux_loss_coeff", 0.1}, {"moe_z_loss_coeff", 0.01}};
  add("sigmoid_top2", sigmoid, 2, 10);
  sigmoid.options["moe_router_topk"] = 1;
  add("sigmoid_top1", sigmoid, 1, 16);
  moe_test::Config top1 = post;
  top1.options = {{"num_moe_experts", 4}, {"moe_router_topk", 1}, {"moe_aux_loss_coeff", 0.1}};
  add("softmax_top1", top1, 2, 8);
  moe_test::Config wide = post;
  wide.options = {{"num_moe_experts", 8}, {"moe_router_topk", 2}, {"moe_aux_loss_coeff", 0.1}};
  add("softmax_8_experts_top2", wide, 3, 16);
  moe_test::Config capacity = post;
  capacity.options = {{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_expert_capacity_factor", 0.6},
                      {"moe_aux_loss_coeff", 0.1}};
  add("capacity_by_probs", capacity, 2, 10);
  capacity.options["moe_token_drop_policy"] = "position";
  capacity.options["moe_expert_capacity_factor"] = 0.8;
  add("capacity_by_position", capacity, 2, 10);
  moe_test::Config shared = post;
  shared.activation = "swiglu";
  shared.options = {{"num_moe_experts", 4}, {"moe_router_topk", 2}, {"moe_shared_expert_intermediate_size", 20},
                    {"moe_z_loss_coeff", 0.01}};
  add("shared_experts_swiglu", shared, 2, 8);
  // DeepSeek-V3's routed scaling (2.5) and Megatron's shared expert gate.
  moe_test::Config gated = shared;
  gated.options["moe_shared_expert_gate"] = true;
  gated.options["moe_router_topk_scaling_factor"] = 2.5;
  gated.options["moe_router_score_function"] = "sigmoid";
  add("shared_gate_sigmoid_scaled", gated, 2, 8);
  moe_test::Config grouped = post;
  grouped.options = {{"num_moe_experts", 8}, {"moe_router_topk", 2}, {"moe_router_num_groups", 2},
                     {"moe_router_group_topk", 1}, {"moe_aux_loss_coeff", 0.1}};
  add("group_limited_softmax", grouped, 2, 10);
  grouped.options = {{"num_moe_experts", 8}, {"moe_router_topk", 4}, {"moe_router_num_groups", 4},
                     {"moe_router_group_topk", 2}, {"moe_router_score_function", "sigmoid"},
                     {"moe_router_pre_softmax", false}, {"moe_aux_loss_coeff", 0.1}};
  add("group_limited_sigmoid", grouped, 2, 10);
  moe_test::Config pre_grouped = pre;
  pre_grouped.options["moe_router_num_groups"] = 3;
  pre_grouped.options["moe_router_group_topk"] = 3;
  add("group_limited_pre_softmax_all_groups", pre_grouped, 2, 9);
  return all;
}

using Tensors = std::map<std::string, Tensor>;

struct Run {
  Tensors inputs, ours;
};

Run run_case(const Case& c, uint64_t seed) {
  moe_test::Layer layer(c.config);
  std::vector<Tensor> params;
  Tensor hidden;
  for (int draw = 0;; ++draw) {
    BOOST_TEST_REQUIRE(draw < 100, c.name << ": no draw without near-ties in 100 tries");
    std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(draw));
    // Drawn in float64 and rounded to the case's dtype, so the reference sees exactly our values.
    params = moe_test::random_params(*layer, c.config, plx_dtype_f64(), rng);
    hidden = tt::random_tensor({c.batch, c.seq, c.config.hidden}, plx_dtype_f64(), rng);
    for (Tensor& p : params) p = p.as(c.dtype).as(plx_dtype_f64());
    hidden = hidden.as(c.dtype).as(plx_dtype_f64());
    const std::vector<double> z = moe_test::logits(c.config, *layer, hidden, params);
    if (std::min({moe_test::routing_margin(z, c.config.experts(), c.config.topk()),
                  moe_test::capacity_margin(c.config, z), moe_test::group_margin(c.config, z)}) >= 1e-3)
      break;
  }
  for (Tensor& p : params) p = p.as(c.dtype);
  hidden = hidden.as(c.dtype);
  std::mt19937_64 rng(seed);
  const Tensor grad_output = tt::random_tensor({c.batch, c.seq, c.config.hidden}, c.dtype, rng);
  Run r;
  r.inputs[c.name + "/hidden"] = hidden;
  r.inputs[c.name + "/grad_output"] = grad_output;
  for (uint32_t i = 0; i < layer->info().num_params; ++i)
    r.inputs[c.name + "/param/" + layer->param(i).name] = params[i];

  moe_test::Run run(*layer, {hidden}, params, c.dtype);
  moe_test::reported().clear();
  r.ours["output"] = run.forward(true)[0];
  Tensor aux({1}, plx_dtype_f64()), z({1}, plx_dtype_f64());
  aux.set(0, moe_test::reported().at("layer0.aux_loss"));
  z.set(0, moe_test::reported().at("layer0.z_loss"));
  if (c.config.coeff("moe_aux_loss_coeff") > 0) r.ours["aux_loss"] = aux;
  if (c.config.coeff("moe_z_loss_coeff") > 0) r.ours["z_loss"] = z;
  std::vector<Tensor> go = {grad_output}, gi = {Tensor(hidden.shape, c.dtype)}, gp;
  for (const Tensor& p : params) gp.emplace_back(p.shape, c.dtype);
  run.backward(go, gi, gp, kLossScale);
  r.ours["grad/hidden"] = gi[0];
  for (uint32_t i = 0; i < layer->info().num_params; ++i) {
    // An expert no token chose has a zero gradient on both sides: nothing to compare at scale.
    const std::vector<double> v = gp[i].values();
    if (std::any_of(v.begin(), v.end(), [](double x) { return x != 0; }))
      r.ours[std::string("grad/") + layer->param(i).name] = gp[i];
  }
  return r;
}

std::span<const std::byte> bytes_of(const Tensor& t) {
  return t.f64.empty() ? std::as_bytes(std::span<const float>(t.f32)) : std::as_bytes(std::span<const double>(t.f64));
}

std::vector<double> reference(const ck::SafetensorsFile& file, const std::string& name, const Tensor& like) {
  const ck::TensorView view = file.tensor(name);
  BOOST_TEST_REQUIRE((view.dtype == ck::DType::f64 &&
                      std::equal(view.shape.begin(), view.shape.end(), like.shape.begin(), like.shape.end())),
                     name << ": the reference's tensor has another dtype or shape");
  const auto* values = reinterpret_cast<const double*>(view.bytes.data());
  return std::vector<double>(values, values + view.bytes.size() / sizeof(double));
}

double scaled_error(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST_REQUIRE(std::isfinite(a[i]), what << "[" << i << "] is not finite");
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  BOOST_TEST_REQUIRE(scale > 0.0, what << ": the reference is zero everywhere, which tests nothing");
  return diff / scale;
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(torch_available(), "/usr/bin/python3 cannot import torch (Debian: python3-torch)")

BOOST_AUTO_TEST_CASE(matches_the_pytorch_reference) {
  const std::vector<Case> all = cases();
  plexus::test::TempDir dir;
  std::map<std::string, Run> runs;
  ck::SafetensorsWriter writer;
  boost::json::array spec;
  uint64_t seed = 1;
  for (const Case& c : all) {
    Run& r = runs[c.name] = run_case(c, seed++);
    for (const auto& [name, t] : r.inputs) writer.add(name, c.f64() ? ck::DType::f64 : ck::DType::f32, t.shape, bytes_of(t));
    spec.emplace_back(c.json());
  }
  writer.write(dir.path() / "inputs.safetensors");
  std::ofstream(dir.path() / "spec.json") << boost::json::serialize(boost::json::object{{"cases", spec}});

  const std::string script = std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/moe_reference.py";
  const auto reference_run = plexus::test::run_process(
      kPython + " " + plexus::test::quote(script) + " --spec " + plexus::test::quote((dir.path() / "spec.json").string()) +
      " --inputs " + plexus::test::quote((dir.path() / "inputs.safetensors").string()) + " --out " +
      plexus::test::quote((dir.path() / "reference.safetensors").string()));
  BOOST_TEST_REQUIRE(reference_run.status == 0, reference_run.output);
  const auto file = ck::SafetensorsFile::open(dir.path() / "reference.safetensors");

  std::map<std::string, double> worst;
  std::size_t compared = 0;
  for (const Case& c : all) {
    for (const auto& [name, ours] : runs[c.name].ours) {
      const bool forward = name == "output" || name == "aux_loss" || name == "z_loss";
      const double bar = c.f64() ? (forward ? 1e-10 : 1e-8) : (forward ? 1e-5 : 1e-4);
      const std::string key = c.name + "/" + name;
      const double e = scaled_error(ours.values(), reference(file, key, ours), key);
      BOOST_TEST(e < bar, key << ": scaled error " << e << " (bar " << bar << ")");
      double& w = worst[std::string(c.f64() ? "float64 " : "float32 ") + (forward ? "forward" : "gradients")];
      w = std::max(w, e);
      ++compared;
    }
  }
  BOOST_TEST(compared > 10 * all.size());  // output, losses, input and every parameter's gradient
  for (const auto& [what, value] : worst)
    BOOST_TEST_MESSAGE(all.size() << " cases, worst scaled error, " << what << ": " << value);
}

// mamba.mixer against its contract (plugins/mamba/README.md): parameter names, shapes,
// initialization and weight-decay flags; the options' schema and Megatron-LM's defaults; the
// statistics of the custom initializers (A_log, dt_bias); what a forward keeps and what a
// backward accumulates; float32 against float64; the FLOP estimate; and the refusals of bad
// options, devices and tensors, each naming what is wrong. The numerics of forward and backward
// are checked in test_mamba_gradcheck.cpp and against PyTorch in tests/integration/test_mamba_parity.cpp.
#define BOOST_TEST_MODULE mamba_contract
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "plexus/core/config.hpp"
#include "plexus/core/device.hpp"
#include "test_mamba_support.hpp"

namespace {

using mamba_test::Config;
using tt::Tensor;

const DLDataType kF64 = plx_dtype_f64();
const DLDataType kF32 = plx_dtype_f32();
constexpr uint32_t kNoDecay = PLX_PARAM_NO_WEIGHT_DECAY;

struct Expect {
  const char* name;
  std::vector<int64_t> shape;
  uint32_t init;
  double a, b;  // std (normal) or bounds (uniform)
  uint32_t flags;
  // Tensor parallelism (ABI 1.8): the dimension split over tp (-1: whole on every rank) and the
  // whole parts along it (empty: one).
  int32_t tp_dim = -1;
  std::vector<int64_t> parts = {};
};

void expect_params(const Config& c, const std::vector<Expect>& expected) {
  mamba_test::Layer layer(c);
  const plx_layer_info info = layer->info();
  BOOST_TEST(info.num_inputs == 1u);
  BOOST_TEST(info.num_outputs == 1u);
  BOOST_TEST(info.flags == static_cast<uint32_t>(PLX_LAYER_CONTEXT_PARALLEL));  // head-parallel over cp
  BOOST_TEST(info.num_stages == 1u);
  BOOST_TEST(std::string(layer->stage(0).name) == "mamba.mixer");
  BOOST_TEST(layer->stage(0).kind == static_cast<uint32_t>(PLX_STAGE_COMPUTE));
  BOOST_TEST_REQUIRE(info.num_params == expected.size());
  for (uint32_t i = 0; i < info.num_params; ++i) {
    const plx_param_spec p = layer->param(i);
    const Expect& e = expected[i];
    BOOST_TEST_CONTEXT("parameter " << i << " (" << e.name << ")") {
      BOOST_TEST(std::string(p.name) == e.name);
      BOOST_TEST(std::vector<int64_t>(p.desc.dims, p.desc.dims + p.desc.ndim) == e.shape,
                 boost::test_tools::per_element());
      BOOST_TEST(plx_dtype_equal(p.desc.dtype, kF32));
      BOOST_TEST(p.init == e.init);
      if (p.init == PLX_INIT_NORMAL) BOOST_TEST(p.init_a == e.a, boost::test_tools::tolerance(1e-15));
      if (p.init == PLX_INIT_UNIFORM) {
        BOOST_TEST(p.init_a == e.a, boost::test_tools::tolerance(1e-15));
        BOOST_TEST(p.init_b == e.b, boost::test_tools::tolerance(1e-15));
      }
      const uint32_t split = e.tp_dim >= 0 ? uint32_t{PLX_PARAM_TENSOR_PARALLEL} : 0u;
      BOOST_TEST(p.flags == (e.flags | split));
      if (split != 0) {
        BOOST_TEST(p.tp_dim == e.tp_dim);
        BOOST_TEST(std::vector<int64_t>(p.tp_part_sizes, p.tp_part_sizes + p.tp_num_parts) == e.parts,
                   boost::test_tools::per_element());
      }
      BOOST_TEST(p.grad_group == nullptr);  // averaged over data parallelism like any parameter
    }
  }
}

// The layer's custom initializer run on a float64 tensor of parameter `name`'s shape.
std::vector<double> custom_init(const plexus::LayerInstance& layer, const std::string& name, uint64_t seed,
                                DLDataType dtype = kF64) {
  const auto index = static_cast<uint32_t>(mamba_test::param_index(layer, name));
  const plx_param_spec p = layer.param(index);
  BOOST_TEST_REQUIRE(p.init == static_cast<uint32_t>(PLX_INIT_CUSTOM));
  Tensor t(std::vector<int64_t>(p.desc.dims, p.desc.dims + p.desc.ndim), dtype);
  DLTensor v = t.view();
  layer.init_param(index, v, seed);
  return t.values();
}

double softplus(double v) {
  return v > 20 ? v : std::log1p(std::exp(v));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

// Many heads of width 1, so the initializers' statistics have thousands of samples.
Config many_heads(int64_t heads) {
  Config c;
  c.options = {
      {"mamba_state_dim", 1}, {"mamba_head_dim", 1}, {"mamba_num_groups", 1}, {"mamba_num_heads", heads}};
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(specs)

// d_model 16, expand 2: d_inner 32; P 8: H 4; G 2, N 16: in_proj rows 2 * 32 + 2 * 2 * 16 + 4 = 132,
// conv channels 32 + 2 * 2 * 16 = 96; d_conv 4: conv bounds 1 / sqrt(4) = 0.5.
BOOST_AUTO_TEST_CASE(parameters_names_shapes_init_and_weight_decay) {
  Config c;
  c.num_layers = 4;
  const double out_std = 0.02 / std::sqrt(4.0);  // hybrid models: 1 / sqrt(num_layers), not sqrt(2 L)
  // Under tensor parallelism in_proj's rows are the parts [z, x, B, C, dt] and the convolution's
  // channels [x, B, C], each divided over tp; the rest by heads, out_proj by columns.
  const std::vector<Expect> mixer = {
      {"mixer.in_proj.weight", {132, 16}, PLX_INIT_NORMAL, 0.02, 0, 0, 0, {32, 32, 32, 32, 4}},
      {"mixer.conv1d.weight", {96, 1, 4}, PLX_INIT_UNIFORM, -0.5, 0.5, 0, 0, {32, 32, 32}},
      {"mixer.conv1d.bias", {96}, PLX_INIT_UNIFORM, -0.5, 0.5, kNoDecay, 0, {32, 32, 32}},
      {"mixer.dt_bias", {4}, PLX_INIT_CUSTOM, 0, 0, kNoDecay, 0},
      {"mixer.A_log", {4}, PLX_INIT_CUSTOM, 0, 0, kNoDecay, 0},
      {"mixer.D", {4}, PLX_INIT_ONES, 0, 0, kNoDecay, 0},
      {"mixer.norm.weight", {32}, PLX_INIT_ONES, 0, 0, kNoDecay, 0},
      {"mixer.out_proj.weight", {16, 32}, PLX_INIT_NORMAL, out_std, 0, 0, 1}};
  std::vector<Expect> rms = {{"norm.weight", {16}, PLX_INIT_ONES, 0, 0, kNoDecay}};
  rms.insert(rms.end(), mixer.begin(), mixer.end());
  expect_params(c, rms);

  c.normalization = "LayerNorm";
  std::vector<Expect> ln = {{"norm.weight", {16}, PLX_INIT_ONES, 0, 0, kNoDecay},
                            {"norm.bias", {16}, PLX_INIT_ZEROS, 0, 0, kNoDecay}};
  ln.insert(ln.end(), mixer.begin(), mixer.end());
  expect_params(c, ln);
}

// The layers adding to the residual stream come from the create args (ABI 1.6), which the engine
// fills from the stack's description; from an older host, num_layers, which in the hybrid models a
// Mamba layer belongs to is the same count.
BOOST_AUTO_TEST_CASE(out_proj_std_takes_the_residual_layers_of_the_create_args) {
  Config c;
  c.init_method_std = 0.05;
  c.num_layers = 4;
  c.residual_layers = 9;
  mamba_test::Layer layer(c);
  const plx_param_spec out =
      layer->param(static_cast<uint32_t>(mamba_test::param_index(*layer, "mixer.out_proj.weight")));
  BOOST_TEST(out.init_a == 0.05 / 3.0, boost::test_tools::tolerance(1e-15));
  // The pre-norm's second spelling (Megatron's TE hybrid spec fuses it into in_proj).
  const plx_param_spec norm = layer->param(static_cast<uint32_t>(mamba_test::param_index(*layer, "norm.weight")));
  BOOST_TEST(std::string(norm.te_name) == "mixer.in_proj.layer_norm_weight");
}

BOOST_AUTO_TEST_CASE(out_proj_std_scales_with_one_over_sqrt_num_layers_and_conv_init_sets_the_weight_bound) {
  Config c;
  c.init_method_std = 0.05;
  for (uint32_t layers : {1u, 9u, 25u}) {
    c.num_layers = layers;
    mamba_test::Layer layer(c);
    const plx_param_spec in =
        layer->param(static_cast<uint32_t>(mamba_test::param_index(*layer, "mixer.in_proj.weight")));
    const plx_param_spec out =
        layer->param(static_cast<uint32_t>(mamba_test::param_index(*layer, "mixer.out_proj.weight")));
    BOOST_TEST(in.init_a == 0.05, boost::test_tools::tolerance(1e-15));
    BOOST_TEST(out.init_a == 0.05 / std::sqrt(static_cast<double>(layers)),
               boost::test_tools::tolerance(1e-15));
  }
  c.options["conv_init"] = 0.25;
  c.options["d_conv"] = 9;  // the bias keeps PyTorch's default bound 1 / sqrt(9)
  mamba_test::Layer layer(c);
  const plx_param_spec w =
      layer->param(static_cast<uint32_t>(mamba_test::param_index(*layer, "mixer.conv1d.weight")));
  const plx_param_spec b =
      layer->param(static_cast<uint32_t>(mamba_test::param_index(*layer, "mixer.conv1d.bias")));
  BOOST_TEST(w.init_a == -0.25);
  BOOST_TEST(w.init_b == 0.25);
  BOOST_TEST(w.desc.dims[2] == 9);
  BOOST_TEST(b.init_a == -1.0 / 3, boost::test_tools::tolerance(1e-15));
  BOOST_TEST(b.init_b == 1.0 / 3, boost::test_tools::tolerance(1e-15));
}

// No options at all: Megatron-LM's defaults. d_model 256: d_inner 512, P 64: H 8, G 8, N 128:
// in_proj rows 2 * 512 + 2 * 8 * 128 + 8 = 3080, conv channels 512 + 2048 = 2560.
BOOST_AUTO_TEST_CASE(megatron_defaults_without_options_and_from_the_schema) {
  Config c;
  c.d_model = 256;
  c.options = {};
  mamba_test::Layer bare(c);
  const auto shape = [&](const std::string& name) {
    const plx_param_spec p = bare->param(static_cast<uint32_t>(mamba_test::param_index(*bare, name)));
    return std::vector<int64_t>(p.desc.dims, p.desc.dims + p.desc.ndim);
  };
  BOOST_TEST(shape("mixer.in_proj.weight") == (std::vector<int64_t>{3080, 256}),
             boost::test_tools::per_element());
  BOOST_TEST(shape("mixer.conv1d.weight") == (std::vector<int64_t>{2560, 1, 4}),
             boost::test_tools::per_element());
  BOOST_TEST(shape("mixer.A_log") == (std::vector<int64_t>{8}), boost::test_tools::per_element());
  BOOST_TEST(shape("mixer.norm.weight") == (std::vector<int64_t>{512}), boost::test_tools::per_element());

  // The schema the plugin declares fills the same defaults (the engine validates options with it).
  const plexus::Component& component = mamba_test::host().get(PLX_KIND_LAYER, "mamba.mixer");
  const auto schema = plexus::config::Schema::parse(component.config_schema, "mamba.mixer schema");
  boost::json::value options = boost::json::object{};
  plexus::config::validate(options, schema, "model.mamba.options");
  const boost::json::object& o = options.as_object();
  BOOST_TEST(o.at("mamba_state_dim").as_int64() == 128);
  BOOST_TEST(o.at("mamba_head_dim").as_int64() == 64);
  BOOST_TEST(o.at("mamba_num_groups").as_int64() == 8);
  BOOST_TEST(o.at("expand").as_int64() == 2);
  BOOST_TEST(o.at("d_conv").as_int64() == 4);
  BOOST_TEST(o.at("chunk_size").as_int64() == 128);
  BOOST_TEST(o.at("norm_epsilon").to_number<double>() == 1e-5);
  BOOST_TEST(o.at("dt_min").to_number<double>() == 0.001);
  BOOST_TEST(o.at("dt_max").to_number<double>() == 0.1);
  BOOST_TEST(o.at("dt_init_floor").to_number<double>() == 1e-4);
  BOOST_TEST(o.at("A_init_range").as_array().size() == 2u);
  BOOST_TEST(!o.contains("mamba_num_heads"));
  BOOST_TEST(!o.contains("conv_init"));
  // The schema's defaults give the same FLOP count as no options (chunk_size included).
  c.options = o;
  mamba_test::Layer filled(c);
  const plx_tensor_desc d{3, kF32, {2, 300, 256}};
  BOOST_TEST(filled->estimate_flops({d})->forward == bare->estimate_flops({d})->forward);
  BOOST_TEST(filled->estimate_flops({d})->backward == bare->estimate_flops({d})->backward);
  // And refuses what the layer refuses.
  boost::json::value bad = boost::json::object{{"chunk_size", 0}};
  BOOST_CHECK_THROW(plexus::config::validate(bad, schema, "model.mamba.options"),
                    plexus::config::ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(initialization)

// A_log = log U(1, 16): A = -exp(A_log) starts in [-16, -1], uniformly. 4096 samples: the mean of
// U(1, 16) is 8.5 with a standard error of 15 / sqrt(12 * 4096) = 0.068; the bar is 5 of those.
BOOST_AUTO_TEST_CASE(a_log_is_the_log_of_a_uniform_in_a_init_range) {
  mamba_test::Layer layer(many_heads(4096));
  std::vector<double> a = custom_init(*layer, "mixer.A_log", 7);
  for (double& v : a) v = std::exp(v);
  BOOST_TEST(*std::min_element(a.begin(), a.end()) >= 1.0);
  BOOST_TEST(*std::max_element(a.begin(), a.end()) <= 16.0);
  BOOST_TEST(*std::min_element(a.begin(), a.end()) < 1.1);  // the range is covered
  BOOST_TEST(*std::max_element(a.begin(), a.end()) > 15.9);
  BOOST_TEST(mean(a) == 8.5, boost::test_tools::tolerance(0.34 / 8.5));

  Config c = many_heads(4096);
  c.options["A_init_range"] = boost::json::array{2, 3};
  mamba_test::Layer narrow(c);
  std::vector<double> b = custom_init(*narrow, "mixer.A_log", 7);
  for (double& v : b) v = std::exp(v);
  BOOST_TEST(*std::min_element(b.begin(), b.end()) >= 2.0);
  BOOST_TEST(*std::max_element(b.begin(), b.end()) <= 3.0);
}

// dt_bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max]: softplus(dt_bias) is in that
// range and log(dt) has mean (log 0.001 + log 0.1) / 2 = -4.605 (standard error over 4096
// samples: 4.6 / sqrt(12 * 4096) = 0.021; the bar is 5 of those).
BOOST_AUTO_TEST_CASE(dt_bias_is_the_inverse_softplus_of_a_log_uniform_dt) {
  mamba_test::Layer layer(many_heads(4096));
  const std::vector<double> bias = custom_init(*layer, "mixer.dt_bias", 11);
  std::vector<double> log_dt;
  for (double v : bias) {
    const double dt = softplus(v);
    BOOST_TEST_REQUIRE(dt >= 0.001 * (1 - 1e-9));
    BOOST_TEST_REQUIRE(dt <= 0.1 * (1 + 1e-9));
    log_dt.push_back(std::log(dt));
  }
  BOOST_TEST(std::abs(mean(log_dt) - 0.5 * (std::log(0.001) + std::log(0.1))) < 0.105);

  // dt_init_floor clamps from below: with dt in [1e-5, 1e-3] log-uniformly, half the draws fall
  // under 1e-4 and are raised to it.
  Config c = many_heads(4096);
  c.options["dt_min"] = 1e-5;
  c.options["dt_max"] = 1e-3;
  c.options["dt_init_floor"] = 1e-4;
  mamba_test::Layer floored(c);
  int at_floor = 0;
  for (double v : custom_init(*floored, "mixer.dt_bias", 11)) {
    const double dt = softplus(v);
    BOOST_TEST_REQUIRE(dt >= 1e-4 * (1 - 1e-9));
    at_floor += std::abs(dt - 1e-4) < 1e-12 ? 1 : 0;
  }
  BOOST_TEST(at_floor > 4096 * 0.45);
  BOOST_TEST(at_floor < 4096 * 0.55);
}

// The draws depend on the seed only: the same seed gives the same values (in float32 too), another
// seed others; the host keys the seed by the parameter's full name.
BOOST_AUTO_TEST_CASE(custom_init_is_a_function_of_the_seed) {
  mamba_test::Layer layer(many_heads(64));
  const std::vector<double> a = custom_init(*layer, "mixer.A_log", 3);
  BOOST_TEST(a == custom_init(*layer, "mixer.A_log", 3), boost::test_tools::per_element());
  const std::vector<double> f32 = custom_init(*layer, "mixer.A_log", 3, kF32);
  for (std::size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(f32[i] == static_cast<double>(static_cast<float>(a[i])));
  const std::vector<double> other = custom_init(*layer, "mixer.A_log", 4);
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == other[i] ? 1 : 0;
  BOOST_TEST(same == 0u);

  // Parameters the host initializes have no custom initializer.
  const auto in_proj = static_cast<uint32_t>(mamba_test::param_index(*layer, "mixer.in_proj.weight"));
  Tensor t({1, 1}, kF64);
  DLTensor v = t.view();
  const std::string e = tt::error_of([&] { layer->init_param(in_proj, v, 1); });
  BOOST_TEST(tt::mentions(e, "no custom initializer"), e);
  // A value of the wrong shape is refused, naming the parameter.
  const auto a_log = static_cast<uint32_t>(mamba_test::param_index(*layer, "mixer.A_log"));
  Tensor wrong({63}, kF64);
  DLTensor wv = wrong.view();
  const std::string shape_error = tt::error_of([&] { layer->init_param(a_log, wv, 1); });
  BOOST_TEST((tt::mentions(shape_error, "A_log") && tt::mentions(shape_error, "[64]")), shape_error);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(calls)

// An inference forward computes what a training forward does; a backward accumulates parameter
// gradients (twice: doubled) and writes the input gradient (twice: the same).
BOOST_AUTO_TEST_CASE(inference_forward_and_accumulating_backward) {
  const Config c;
  mamba_test::Layer layer(c);
  std::mt19937_64 rng(21);
  const std::vector<Tensor> params = mamba_test::random_params(*layer, c, kF64, rng);
  const Tensor x = tt::random_tensor({2, 37, 16}, kF64, rng);
  tt::Run train(*layer, {x}, params, kF64), infer(*layer, {x}, params, kF64);
  const std::vector<double> y = train.forward(true)[0].values();
  BOOST_TEST(infer.forward(false)[0].values() == y, boost::test_tools::per_element());

  std::vector<Tensor> go = {tt::random_tensor({2, 37, 16}, kF64, rng)}, gi = {Tensor({2, 37, 16}, kF64)}, gp;
  for (const Tensor& p : params) gp.emplace_back(p.shape, kF64);
  train.backward(go, gi, gp);
  const std::vector<Tensor> once_p = gp;
  const std::vector<double> once_i = gi[0].values();
  train.backward(go, gi, gp);
  BOOST_TEST(gi[0].values() == once_i, boost::test_tools::per_element());
  for (std::size_t p = 0; p < gp.size(); ++p)
    BOOST_TEST_CONTEXT(layer->param(static_cast<uint32_t>(p)).name) {
      double largest = 0;
      for (std::size_t i = 0; i < static_cast<std::size_t>(gp[p].numel()); ++i) {
        largest = std::max(largest, std::abs(once_p[p].get(i)));
        BOOST_TEST(gp[p].get(i) == 2 * once_p[p].get(i), boost::test_tools::tolerance(1e-12));
      }
      BOOST_TEST(largest > 1e-6);
    }

  // Gradients nobody asked for (null data) are skipped; the rest are the same.
  std::vector<Tensor> gi2 = {Tensor({2, 37, 16}, kF64)}, gp2;
  gi2[0].null_data = true;
  for (const Tensor& p : params) gp2.emplace_back(p.shape, kF64);
  const std::size_t in_proj = mamba_test::param_index(*layer, "mixer.in_proj.weight");
  gp2[in_proj].null_data = true;
  train.backward(go, gi2, gp2);
  for (std::size_t p = 0; p < gp2.size(); ++p)
    if (p != in_proj)
      for (std::size_t i = 0; i < static_cast<std::size_t>(gp2[p].numel()); ++i)
        BOOST_TEST(gp2[p].get(i) == once_p[p].get(i), boost::test_tools::tolerance(1e-12));
}

// float32 against float64 on the same (float32-representable) values, at a size where the SSD's
// chunks and the vectorized loops are exercised: 1e-5 of the output's largest magnitude (float32
// rounds at 6e-8; the sums here have at most a few hundred terms).
BOOST_AUTO_TEST_CASE(float32_matches_float64) {
  Config c;
  c.options["chunk_size"] = 32;
  mamba_test::Layer layer(c);
  std::mt19937_64 rng(22);
  const std::vector<Tensor> p32 = mamba_test::random_params(*layer, c, kF32, rng);
  const Tensor x32 = tt::random_tensor({2, 100, 16}, kF32, rng);
  std::vector<Tensor> p64;
  for (const Tensor& t : p32) p64.push_back(t.as(kF64));
  tt::Run r32(*layer, {x32}, p32, kF32), r64(*layer, {x32.as(kF64)}, p64, kF64);
  const std::vector<double> y32 = r32.forward(true)[0].values(), y64 = r64.forward(true)[0].values();
  BOOST_TEST(plx_dtype_equal(r32.outputs[0].dtype, kF32));
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < y64.size(); ++i) {
    err = std::max(err, std::abs(y32[i] - y64[i]));
    scale = std::max(scale, std::abs(y64[i]));
  }
  BOOST_TEST_MESSAGE("float32 against float64: " << err << " of " << scale);
  BOOST_TEST(scale > 0.0);
  BOOST_TEST(err <= 1e-5 * scale);
}

// The matrix products as run, from the formula of the README: the projections 2 T d (R + d_inner)
// forward and twice that backward; per chunk of q tokens the SSD's products.
BOOST_AUTO_TEST_CASE(flop_estimate_counts_the_matrix_products) {
  Config c;  // d 16, d_inner 32, H 4, P 8, G 2, N 16, R 132, chunk 16
  mamba_test::Layer layer(c);
  const int64_t batch = 3, seq = 40;  // chunks of 16, 16, 8
  const double P = 8, N = 16, H = 4, G = 2, T = batch * seq;
  double fwd = 2 * T * 16 * (132 + 32), bwd = 2 * fwd;
  const std::vector<double> q = {16, 16, 8};
  for (std::size_t i = 0; i < q.size(); ++i) {
    const double in = i > 0 ? 1 : 0, out = i + 1 < q.size() ? 1 : 0, n = q[i];
    fwd += batch * 2 * (G * n * n * N + H * (out * P * N * n + in * n * P * N + n * n * P));
    bwd += batch * 2 *
           (G * 3 * n * n * N + H * (in * P * N * n + 2 * n * n * P + in * n * N * P + 2 * out * n * N * P));
  }
  const auto f = layer->estimate_flops({plx_tensor_desc{3, kF64, {batch, seq, 16}}});
  BOOST_TEST_REQUIRE(f.has_value());
  BOOST_TEST(f->forward == fwd, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(f->backward == bwd, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(errors)

// Each bad option is refused when the layer is created, naming the option and the value.
BOOST_AUTO_TEST_CASE(bad_options_are_refused_naming_the_option) {
  struct Bad {
    boost::json::object options;
    std::vector<std::string> mentions;
  };
  const boost::json::object base = Config().options;
  const auto with = [&](const char* key, boost::json::value v) {
    boost::json::object o = base;
    o[key] = std::move(v);
    return o;
  };
  const std::vector<Bad> bad = {
      {with("chunk_size", 0), {"chunk_size", "at least 1", "0"}},
      {with("mamba_state_dim", -3), {"mamba_state_dim", "-3"}},
      {with("mamba_head_dim", 5), {"mamba_head_dim", "(5)", "d_inner", "32"}},  // 32 % 5
      {with("mamba_num_groups", 3), {"mamba_num_groups", "(3)", "heads, 4"}},   // 4 % 3
      {with("mamba_num_heads", 0), {"mamba_num_heads", "0"}},
      {with("d_conv", 0), {"d_conv", "0"}},
      {with("expand", 0), {"expand", "0"}},
      {with("norm_epsilon", 0), {"norm_epsilon", "> 0"}},
      {with("dt_min", -1), {"dt_min", "-1"}},
      {with("dt_max", 0.0001), {"dt_max", "dt_min"}},
      {with("dt_init_floor", -0.5), {"dt_init_floor", ">= 0"}},
      {with("conv_init", 0), {"conv_init", "> 0"}},
      {with("A_init_range", boost::json::array{0, 16}), {"A_init_range", "0 < min <= max"}},
      {with("A_init_range", boost::json::array{4, 2}), {"A_init_range", "[4, 2]"}},
      {with("A_init_range", boost::json::array{1, 2, 3}), {"A_init_range", "two numbers"}},
      {with("chunk_size", "big"), {"chunk_size", "integer"}},
  };
  for (const Bad& b : bad) {
    Config c;
    c.options = b.options;
    const std::string e = tt::error_of([&] { mamba_test::Layer layer(c); });
    for (const std::string& m : b.mentions) BOOST_TEST(tt::mentions(e, m), "'" << m << "' not in: " << e);
  }

  Config c;
  c.normalization = "BatchNorm";
  std::string e = tt::error_of([&] { mamba_test::Layer layer(c); });
  BOOST_TEST((tt::mentions(e, "normalization") && tt::mentions(e, "BatchNorm")), e);
  c = Config();
  c.num_layers = 0;
  e = tt::error_of([&] { mamba_test::Layer layer(c); });
  BOOST_TEST(tt::mentions(e, "num_layers"), e);
}

// A CUDA device past the last this process sees (cuda:0 here without a GPU) is refused when the
// layer is created, naming it: by a build without CUDA because it has none, by a CUDA build
// because there is no such device. Other device types are refused by either, naming the type.
BOOST_AUTO_TEST_CASE(devices_the_layer_cannot_use_are_refused) {
  const int count = plexus::device::cuda_device_count();
  std::string e = tt::error_of([&] { mamba_test::Layer layer(Config(), DLDevice{kDLCUDA, count}); });
  BOOST_TEST((tt::mentions(e, "unsupported") && tt::mentions(e, "cuda:" + std::to_string(count)) &&
              (tt::mentions(e, "built without CUDA") || tt::mentions(e, "CUDA device(s)"))),
             e);
  e = tt::error_of([&] { mamba_test::Layer layer(Config(), DLDevice{kDLROCM, 0}); });
  BOOST_TEST((tt::mentions(e, "runs on the CPU") &&
              tt::mentions(e, "device type " + std::to_string(static_cast<int>(kDLROCM)))),
             e);
}

BOOST_AUTO_TEST_CASE(bad_tensors_are_refused_with_the_values_named) {
  const Config c;
  mamba_test::Layer layer(c);
  std::mt19937_64 rng(31);
  const std::vector<Tensor> p64 = mamba_test::random_params(*layer, c, kF64, rng);

  std::string e = tt::error_of([&] {
    tt::Run run(*layer, {Tensor({2, 5, 16}, plx_dtype_i32())}, p64, kF64);
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "float32 or float64") && tt::mentions(e, "int32")), e);

  std::vector<Tensor> wide = {Tensor({2, 5, 17}, kF64)};
  e = tt::error_of([&] { (void)layer->output_desc(tt::descs(wide)); });
  BOOST_TEST((tt::mentions(e, "[batch, seq, 16]") && tt::mentions(e, "[2, 5, 17]")), e);

  std::vector<Tensor> p32;
  for (const Tensor& t : p64) p32.push_back(t.as(kF32));
  e = tt::error_of([&] {
    tt::Run run(*layer, {tt::random_tensor({2, 5, 16}, kF64, rng)}, p32, kF64);
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "norm.weight") && tt::mentions(e, "does not match")), e);

  std::vector<Tensor> bad = p64;
  bad[mamba_test::param_index(*layer, "mixer.conv1d.weight")] = Tensor({96, 4}, kF64);
  e = tt::error_of([&] {
    tt::Run run(*layer, {tt::random_tensor({2, 5, 16}, kF64, rng)}, bad, kF64);
    run.forward();
  });
  BOOST_TEST(
      (tt::mentions(e, "conv1d.weight") && tt::mentions(e, "[96, 1, 4]") && tt::mentions(e, "[96, 4]")), e);

  const auto backward_after = [&](bool training, DLDataType grad_dtype, int64_t seq) {
    return tt::error_of([&] {
      tt::Run run(*layer, {tt::random_tensor({2, 5, 16}, kF64, rng)}, p64, kF64);
      run.forward(training);
      std::vector<Tensor> go = {Tensor({2, seq, 16}, grad_dtype)}, gi = {Tensor({2, seq, 16}, grad_dtype)},
                          gp;
      for (const Tensor& t : p64) gp.emplace_back(t.shape, grad_dtype);
      run.params = grad_dtype.bits == 32 ? p32 : p64;
      run.backward(go, gi, gp);
    });
  };
  e = backward_after(false, kF64, 5);
  BOOST_TEST(tt::mentions(e, "PLX_FORWARD_TRAINING"), e);
  e = backward_after(true, kF32, 5);
  BOOST_TEST((tt::mentions(e, "backward in float32") && tt::mentions(e, "forward in float64")), e);
  e = backward_after(true, kF64, 6);
  BOOST_TEST((tt::mentions(e, "[2, 6]") && tt::mentions(e, "[2, 5]")), e);
}

BOOST_AUTO_TEST_SUITE_END()

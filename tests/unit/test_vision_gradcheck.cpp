// The vision plugin's layers (vision.patch_embedding, vision.projection), loaded from the real
// built plugin by the real plugin host: float64 gradient checks of every parameter and input
// against central finite differences, a float64 re-implementation of the patch embedding as a
// strided convolution over the un-cut image, the declared contract (parameters, flags, schema
// defaults, FLOPs) and the refusals, checked by their messages.
//
// The checked function is a random linear functional of the output, L = sum(r * output) with
// r ~ N(0, 1); inputs are N(0, 1), parameters N(0, 1) * 0.5 (not the host's initialization, so
// that the projector's pre-activations spread over gelu's curved part).
//
// Tolerance of the gradient checks: |analytic - numeric| <= 1e-6 * |numeric| + 1e-7 per element,
// with a step h = 1e-6. The patch embedding is linear in each of its parameters and its pixels,
// so its central differences have no truncation error at all; the projector's has
// h^2 / 6 * |L'''| ~ 1e-12. What remains is the rounding of L divided by h: L is a float64 sum of
// at most a few hundred terms of magnitude <= ~10, rounded by ~1e-14, i.e. ~1e-8 on the quotient.
// 1e-7 is ten times that floor; any real mistake (a transposed weight, a missing bias term, gelu's
// derivative off, a wrong patch index) gives errors of 1e-2 or more of gradients that are O(0.1..10).
#define BOOST_TEST_MODULE vision_gradcheck
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "plexus/core/config.hpp"
#include "test_transformer_support.hpp"

namespace {

using tt::Tensor;

constexpr double kStep = 1e-6;
constexpr double kRelTol = 1e-6;
constexpr double kAbsTol = 1e-7;

const DLDataType kF64 = plx_dtype_f64();
const DLDataType kF32 = plx_dtype_f32();
const DLDevice kCpu{kDLCPU, 0};

// One host for the whole test program with the vision plugin loaded; unloaded at exit (so a plugin
// that cannot be unloaded cleanly fails the run).
plexus::PluginHost& host() {
  static plexus::PluginHost instance;
  static const bool loaded = [] {
    tt::load_built_plugin(instance, "vision");
    return true;
  }();
  (void)loaded;
  return instance;
}

const plexus::Component& component(const std::string& name) {
  return host().get(PLX_KIND_LAYER, name);
}

// The model section's keys the layers read: the encoder's width and the std of the normal inits.
boost::json::object model_section(int64_t hidden) {
  return {{"hidden_size", hidden}, {"init_method_std", 0.02}};
}

// A vision layer created as the engine creates one, with its options (unvalidated: the layer's own
// checks are under test) and the model section.
struct Layer : tt::ComponentLayer {
  Layer(const std::string& name, boost::json::object options, int64_t hidden, DLDevice device = kCpu)
      : tt::ComponentLayer(component(name), std::move(options), "model.encoder.options",
                           model_section(hidden), 1, device) {}
};

// The patch embedding's sizes, as the README defines them.
struct Patches {
  int64_t image = 6, patch = 2, channels = 3, hidden = 5;
  int64_t side() const { return image / patch; }
  int64_t count() const { return side() * side(); }
  int64_t dim() const { return channels * patch * patch; }
  boost::json::object options() const {
    return {{"image_size", image}, {"patch_size", patch}, {"channels", channels}};
  }
};

// The projector's sizes; ffn 0 leaves the option out (its default, output_size).
struct Projector {
  int64_t hidden = 6, ffn = 7, out = 5;
  boost::json::object options() const {
    boost::json::object o{{"output_size", out}};
    if (ffn != 0) o["ffn_hidden_size"] = ffn;
    return o;
  }
  int64_t width() const { return ffn != 0 ? ffn : out; }
};

double objective(tt::Run& run, const Tensor& r) {
  std::vector<Tensor>& out = run.forward(true);
  double l = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(r.numel()); ++i) l += r.get(i) * out[0].get(i);
  return l;
}

struct Gradients {
  std::vector<Tensor> inputs, params;
};

// Forward and backward; the input gradient starts as garbage (it must be written, not added to),
// parameter gradients at zero (they are accumulated).
Gradients analytic(tt::Run& run, const Tensor& r) {
  run.forward(true);
  Gradients g;
  for (const Tensor& in : run.inputs) {
    Tensor t(in.shape, in.dtype);
    t.fill(123.0);
    g.inputs.push_back(t);
  }
  for (const Tensor& p : run.params) g.params.emplace_back(p.shape, p.dtype);
  std::vector<Tensor> go = {r};
  run.backward(go, g.inputs, g.params);
  return g;
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
    double largest = 0, worst_abs = 0;
    std::size_t failures = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double err = std::abs(a[i] - n[i]);
      largest = std::max(largest, std::abs(n[i]));
      worst_abs = std::max(worst_abs, err);
      if (err > kRelTol * std::abs(n[i]) + kAbsTol) {
        if (++failures <= 5) BOOST_ERROR("element " << i << ": analytic " << a[i] << ", numeric " << n[i]);
      }
    }
    BOOST_TEST_MESSAGE(what << ": " << a.size() << " elements, largest |grad| " << largest << ", worst error "
                            << worst_abs);
    BOOST_TEST(failures == 0u);
    // A gradient that is zero everywhere would pass trivially: each one here is not.
    BOOST_TEST(largest > 1e-3);
  }
}

// Every input and every parameter of `layer` on `input`.
void gradcheck(const plexus::LayerInstance& layer, Tensor input, uint64_t seed) {
  std::mt19937_64 rng(seed);
  tt::Run run(layer, {std::move(input)}, tt::random_params(layer, kF64, rng), kF64);
  run.forward(true);
  const Tensor r = tt::random_tensor(run.outputs[0].shape, kF64, rng);
  const Gradients g = analytic(run, r);
  compare("input 0", g.inputs[0].values(), numeric(run, run.inputs[0], r));
  for (std::size_t p = 0; p < run.params.size(); ++p)
    compare(std::string("parameter ") + layer.param(static_cast<uint32_t>(p)).name, g.params[p].values(),
            numeric(run, run.params[p], r));
}

// Backward twice on one forward: parameter gradients double (accumulated), the input gradient is
// the same (written).
void accumulates(const plexus::LayerInstance& layer, Tensor input, uint64_t seed) {
  std::mt19937_64 rng(seed);
  tt::Run run(layer, {std::move(input)}, tt::random_params(layer, kF64, rng), kF64);
  run.forward(true);
  const Tensor r = tt::random_tensor(run.outputs[0].shape, kF64, rng);
  Gradients g = analytic(run, r);
  const Gradients once = g;
  std::vector<Tensor> go = {r};
  run.backward(go, g.inputs, g.params);
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    BOOST_TEST_CONTEXT("parameter " << layer.param(static_cast<uint32_t>(p)).name) {
      double largest = 0;
      for (std::size_t i = 0; i < static_cast<std::size_t>(g.params[p].numel()); ++i) {
        largest = std::max(largest, std::abs(once.params[p].get(i)));
        BOOST_TEST(g.params[p].get(i) == 2 * once.params[p].get(i), boost::test_tools::tolerance(1e-12));
      }
      BOOST_TEST(largest > 1e-3);
    }
  }
  for (std::size_t k = 0; k < static_cast<std::size_t>(g.inputs[0].numel()); ++k)
    BOOST_TEST(g.inputs[0].get(k) == once.inputs[0].get(k), boost::test_tools::tolerance(1e-12));
}

Tensor pixels(const Patches& s, int64_t batch, DLDataType dtype, std::mt19937_64& rng) {
  return tt::random_tensor({batch, s.count(), s.dim()}, dtype, rng);
}

plx_tensor_desc desc(std::vector<int64_t> shape, DLDataType dtype) {
  plx_tensor_desc d{};
  d.ndim = static_cast<uint32_t>(shape.size());
  d.dtype = dtype;
  for (std::size_t i = 0; i < shape.size(); ++i) d.dims[i] = shape[i];
  return d;
}

// The message of creating `name` with these options, which must fail.
std::string creation_error(const std::string& name, boost::json::object options, int64_t hidden,
                           DLDevice device = kCpu) {
  return tt::error_of([&] { Layer layer(name, std::move(options), hidden, device); });
}

// The component's schema, parsed as the host parses it, validating `options` (defaults filled).
boost::json::value validated(const std::string& name, boost::json::object options) {
  const auto schema = plexus::config::Schema::parse(component(name).config_schema, name + " schema");
  boost::json::value v = std::move(options);
  plexus::config::validate(v, schema, "model.encoder.options");
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradients)

BOOST_AUTO_TEST_CASE(patch_embedding_three_channels) {
  const Patches s;  // 6x6 image, 2x2 patches: P = 9, patch_dim 12, hidden 5
  Layer layer("vision.patch_embedding", s.options(), s.hidden);
  std::mt19937_64 rng(1);
  gradcheck(*layer, pixels(s, 2, kF64, rng), 2);
}

BOOST_AUTO_TEST_CASE(patch_embedding_schema_defaults) {
  // No options: image 8, patch 2, one channel: P = 16, patch_dim 4.
  Layer layer("vision.patch_embedding", {}, 3);
  std::mt19937_64 rng(3);
  gradcheck(*layer, tt::random_tensor({2, 16, 4}, kF64, rng), 4);
}

BOOST_AUTO_TEST_CASE(projection_with_ffn_hidden_size) {
  const Projector s;  // 6 -> 7 -> 5
  Layer layer("vision.projection", s.options(), s.hidden);
  std::mt19937_64 rng(5);
  gradcheck(*layer, tt::random_tensor({2, 3, s.hidden}, kF64, rng), 6);
}

BOOST_AUTO_TEST_CASE(projection_ffn_defaults_to_output_size) {
  Projector s;
  s.ffn = 0;  // 6 -> 5 -> 5
  Layer layer("vision.projection", s.options(), s.hidden);
  BOOST_TEST(layer->param(0).desc.dims[0] == s.out);
  std::mt19937_64 rng(7);
  gradcheck(*layer, tt::random_tensor({3, 2, s.hidden}, kF64, rng), 8);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(accumulation)

BOOST_AUTO_TEST_CASE(param_grads_accumulate_and_input_grads_are_written) {
  const Patches p;
  const Projector q;
  std::mt19937_64 rng(9);
  Layer patch("vision.patch_embedding", p.options(), p.hidden);
  accumulates(*patch, pixels(p, 2, kF64, rng), 10);
  Layer projection("vision.projection", q.options(), q.hidden);
  accumulates(*projection, tt::random_tensor({2, 4, q.hidden}, kF64, rng), 11);
}

// The engine passes the pixels' gradient with data == NULL ("not needed"): the parameters' are
// the same as with it.
BOOST_AUTO_TEST_CASE(pixels_need_no_gradient) {
  const Patches s;
  Layer layer("vision.patch_embedding", s.options(), s.hidden);
  std::mt19937_64 rng(12);
  tt::Run run(*layer, {pixels(s, 2, kF32, rng)}, tt::random_params(*layer, kF64, rng), kF64);
  run.forward(true);
  const Tensor r = tt::random_tensor(run.outputs[0].shape, kF64, rng);
  const Gradients with = analytic(run, r);
  std::vector<Tensor> gi = {Tensor(run.inputs[0].shape, kF32)}, gp;
  gi[0].null_data = true;
  for (const Tensor& p : run.params) gp.emplace_back(p.shape, kF64);
  std::vector<Tensor> go = {r};
  run.backward(go, gi, gp);
  for (std::size_t p = 0; p < gp.size(); ++p)
    for (std::size_t i = 0; i < static_cast<std::size_t>(gp[p].numel()); ++i)
      BOOST_TEST(gp[p].get(i) == with.params[p].get(i));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(contract)

// The patch embedding is conv1 (kernel = stride = patch_size, no bias) over the un-cut image plus
// the positions, when the image [B, C, H, W] is cut into patches numbered row by row, each
// flattened in (channel, row, column) order: a float64 strided convolution written from that
// definition against the layer, to rounding (1e-12 of values that are O(1..10)).
BOOST_AUTO_TEST_CASE(patch_embedding_is_a_strided_convolution_over_the_image) {
  Patches s;
  s.image = 8;
  s.patch = 4;
  s.channels = 2;
  s.hidden = 3;
  const int64_t batch = 2, side = s.side(), p = s.patch, c_n = s.channels, hw = s.image;
  Layer layer("vision.patch_embedding", s.options(), s.hidden);
  std::mt19937_64 rng(13);
  const Tensor image = tt::random_tensor({batch, c_n, hw, hw}, kF64, rng);
  std::vector<Tensor> params = tt::random_params(*layer, kF64, rng);
  Tensor cut({batch, s.count(), s.dim()}, kF64);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < side; ++i)
      for (int64_t j = 0; j < side; ++j)
        for (int64_t c = 0; c < c_n; ++c)
          for (int64_t r = 0; r < p; ++r)
            for (int64_t q = 0; q < p; ++q)
              cut.set(
                  static_cast<std::size_t>(((b * s.count() + i * side + j) * c_n + c) * p * p + r * p + q),
                  image.get(static_cast<std::size_t>(((b * c_n + c) * hw + i * p + r) * hw + j * p + q)));
  tt::Run run(*layer, {cut}, params, kF64);
  const Tensor out = run.forward(false)[0];
  BOOST_TEST((out.shape == std::vector<int64_t>{batch, s.count(), s.hidden}),
             boost::test_tools::per_element());
  const Tensor& w = params[0];    // [hidden, C, p, p]
  const Tensor& pos = params[1];  // [P, hidden]
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < side; ++i)
      for (int64_t j = 0; j < side; ++j)
        for (int64_t h = 0; h < s.hidden; ++h) {
          const int64_t n = i * side + j;
          double v = pos.get(static_cast<std::size_t>(n * s.hidden + h));
          for (int64_t c = 0; c < c_n; ++c)
            for (int64_t r = 0; r < p; ++r)
              for (int64_t q = 0; q < p; ++q)
                v += w.get(static_cast<std::size_t>(((h * c_n + c) * p + r) * p + q)) *
                     image.get(static_cast<std::size_t>(((b * c_n + c) * hw + i * p + r) * hw + j * p + q));
          const double ours = out.get(static_cast<std::size_t>((b * s.count() + n) * s.hidden + h));
          BOOST_TEST(ours == v, boost::test_tools::tolerance(1e-12));
        }
}

// The projector: y = gelu(x W1^T + b1) W2^T + b2 with the exact (erf) gelu, in float64 from the
// definition, to rounding.
BOOST_AUTO_TEST_CASE(projection_is_linear_gelu_linear) {
  const Projector s;
  Layer layer("vision.projection", s.options(), s.hidden);
  std::mt19937_64 rng(14);
  const int64_t rows = 6;
  const Tensor x = tt::random_tensor({2, 3, s.hidden}, kF64, rng);
  const std::vector<Tensor> params = tt::random_params(*layer, kF64, rng);
  tt::Run run(*layer, {x}, params, kF64);
  const Tensor y = run.forward(false)[0];
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t o = 0; o < s.out; ++o) {
      double v = params[3].get(static_cast<std::size_t>(o));
      for (int64_t f = 0; f < s.ffn; ++f) {
        double a = params[1].get(static_cast<std::size_t>(f));
        for (int64_t i = 0; i < s.hidden; ++i)
          a += params[0].get(static_cast<std::size_t>(f * s.hidden + i)) *
               x.get(static_cast<std::size_t>(n * s.hidden + i));
        v += params[2].get(static_cast<std::size_t>(o * s.ffn + f)) * 0.5 * a *
             (1 + std::erf(a / std::sqrt(2.0)));
      }
      BOOST_TEST(y.get(static_cast<std::size_t>(n * s.out + o)) == v, boost::test_tools::tolerance(1e-12));
    }
}

// float32 pixels (what the data gives) with float64 activations compute exactly what float64
// pixels of the same values do; float32 activations agree with float64 to float32's rounding.
BOOST_AUTO_TEST_CASE(patch_embedding_dtypes) {
  const Patches s;
  Layer layer("vision.patch_embedding", s.options(), s.hidden);
  std::mt19937_64 rng(15);
  const Tensor px32 = pixels(s, 2, kF32, rng);
  const std::vector<Tensor> params = tt::random_params(*layer, kF64, rng);
  tt::Run from32(*layer, {px32}, params, kF64), from64(*layer, {px32.as(kF64)}, params, kF64);
  const Tensor a = from32.forward(true)[0], b = from64.forward(true)[0];
  BOOST_TEST(a.values() == b.values(), boost::test_tools::per_element());
  std::vector<Tensor> params32;
  for (const Tensor& p : params) params32.push_back(p.as(kF32));
  tt::Run f32(*layer, {px32}, params32, kF32);
  const Tensor c = f32.forward(true)[0];
  BOOST_TEST(plx_dtype_equal(c.dtype, kF32));
  // A dot product of 12 terms of magnitude ~0.5 plus one position: float32 rounding ~1e-6.
  for (std::size_t i = 0; i < static_cast<std::size_t>(c.numel()); ++i)
    BOOST_TEST(c.get(i) == b.get(i), boost::test_tools::tolerance(1e-5));
  // The output's description is the master dtype, float32 (the engine sets the activations').
  const auto out = layer->output_desc({desc({2, s.count(), s.dim()}, kF32)});
  BOOST_TEST(plx_dtype_equal(out[0].dtype, kF32));
}

BOOST_AUTO_TEST_CASE(parameters_flags_and_flops) {
  const Patches p;
  Layer patch("vision.patch_embedding", p.options(), p.hidden);
  const plx_layer_info pi = patch->info();
  BOOST_TEST(pi.flags == 0u);  // neither PLX_LAYER_PRODUCES_LOSS nor PLX_LAYER_CONTEXT_PARALLEL
  BOOST_TEST(pi.num_inputs == 1u);
  BOOST_TEST(pi.num_outputs == 1u);
  BOOST_TEST(pi.num_params == 2u);
  BOOST_TEST(pi.num_stages == 1u);
  BOOST_TEST(std::string(patch->stage(0).name) == "vision.patch_embedding");
  const plx_param_spec w = patch->param(0), pos = patch->param(1);
  BOOST_TEST(std::string(w.name) == "conv1.weight");
  BOOST_TEST((std::vector<int64_t>(w.desc.dims, w.desc.dims + w.desc.ndim) ==
              std::vector<int64_t>{p.hidden, p.channels, p.patch, p.patch}),
             boost::test_tools::per_element());
  BOOST_TEST(std::string(pos.name) == "position_embeddings.weight");
  BOOST_TEST((std::vector<int64_t>(pos.desc.dims, pos.desc.dims + pos.desc.ndim) ==
              std::vector<int64_t>{p.count(), p.hidden}),
             boost::test_tools::per_element());
  for (const plx_param_spec& s : {w, pos}) {
    BOOST_TEST(s.init == static_cast<uint32_t>(PLX_INIT_NORMAL));
    BOOST_TEST(s.init_a == 0.02);
    BOOST_TEST(s.flags == 0u);
  }
  const auto pf = patch->estimate_flops({desc({4, p.count(), p.dim()}, kF32)});
  BOOST_TEST_REQUIRE(pf.has_value());
  BOOST_TEST(pf->forward == 2.0 * 4 * 9 * 12 * 5);
  BOOST_TEST(pf->backward == pf->forward);

  const Projector q;
  Layer proj("vision.projection", q.options(), q.hidden);
  const plx_layer_info qi = proj->info();
  BOOST_TEST(qi.flags == 0u);
  BOOST_TEST(qi.num_inputs == 1u);  // no targets
  BOOST_TEST(qi.num_outputs == 1u);
  BOOST_TEST_REQUIRE(qi.num_params == 4u);
  const char* names[] = {"encoder.linear_fc1.weight", "encoder.linear_fc1.bias", "encoder.linear_fc2.weight",
                         "encoder.linear_fc2.bias"};
  const std::vector<std::vector<int64_t>> shapes = {{q.ffn, q.hidden}, {q.ffn}, {q.out, q.ffn}, {q.out}};
  for (uint32_t i = 0; i < 4; ++i) {
    const plx_param_spec s = proj->param(i);
    BOOST_TEST_CONTEXT(names[i]) {
      BOOST_TEST(std::string(s.name) == names[i]);
      BOOST_TEST(std::vector<int64_t>(s.desc.dims, s.desc.dims + s.desc.ndim) == shapes[i],
                 boost::test_tools::per_element());
      const bool bias = i % 2 == 1;
      BOOST_TEST(s.init == static_cast<uint32_t>(bias ? PLX_INIT_ZEROS : PLX_INIT_NORMAL));
      if (!bias) BOOST_TEST(s.init_a == 0.02);
      BOOST_TEST(s.flags == (bias ? static_cast<uint32_t>(PLX_PARAM_NO_WEIGHT_DECAY) : 0u));
    }
  }
  const auto out = proj->output_desc({desc({2, 9, q.hidden}, kF64)});
  BOOST_TEST((out[0].ndim == 3 && out[0].dims[0] == 2 && out[0].dims[1] == 9 && out[0].dims[2] == q.out));
  BOOST_TEST(plx_dtype_equal(out[0].dtype, kF64));
  const auto qf = proj->estimate_flops({desc({2, 9, q.hidden}, kF32)});
  BOOST_TEST_REQUIRE(qf.has_value());
  BOOST_TEST(qf->forward == 2.0 * 18 * static_cast<double>(q.ffn * (q.hidden + q.out)));
  BOOST_TEST(qf->backward == 2 * qf->forward);
}

// The schemas fill the defaults the layers use and refuse what the layers refuse.
BOOST_AUTO_TEST_CASE(schemas) {
  const boost::json::value p = validated("vision.patch_embedding", {});
  BOOST_TEST(p.at("image_size").as_int64() == 8);
  BOOST_TEST(p.at("patch_size").as_int64() == 2);
  BOOST_TEST(p.at("channels").as_int64() == 1);
  const boost::json::value q = validated("vision.projection", {{"output_size", 16}});
  BOOST_TEST(q.at("ffn_hidden_size").as_int64() == 0);
  BOOST_TEST(q.at("activation").as_string() == "gelu");

  const auto refused = [](const std::string& name, boost::json::object options, const std::string& needle) {
    const std::string message = tt::error_of([&] { validated(name, std::move(options)); });
    BOOST_TEST(tt::mentions(message, needle), message);
  };
  refused("vision.projection", {}, "output_size");
  refused("vision.projection", {{"output_size", 4}, {"activation", "relu"}}, "gelu");
  refused("vision.patch_embedding", {{"patch_sise", 4}}, "patch_size");
  refused("vision.patch_embedding", {{"channels", 0}}, "channels");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(refusals)

BOOST_AUTO_TEST_CASE(patch_size_that_does_not_divide_image_size) {
  const std::string m =
      creation_error("vision.patch_embedding", {{"image_size", 10}, {"patch_size", 4}, {"channels", 3}}, 8);
  BOOST_TEST(tt::mentions(m, "vision.patch_embedding"), m);
  BOOST_TEST(tt::mentions(m, "patch_size (4) does not divide option image_size (10)"), m);
}

BOOST_AUTO_TEST_CASE(wrong_number_of_patches) {
  const Patches s;  // P = 9, patch_dim 12
  Layer layer("vision.patch_embedding", s.options(), s.hidden);
  const auto expect = [](const std::string& m) {
    BOOST_TEST(tt::mentions(m, "vision.patch_embedding"), m);
    BOOST_TEST(tt::mentions(m, "has 16 patches per image"), m);
    BOOST_TEST(tt::mentions(m, "image_size 6 and patch_size 2 give (6 / 2)^2 = 9"), m);
  };
  expect(tt::error_of([&] { layer->output_desc({desc({2, 16, 12}, kF32)}); }));
  // The same in forward, whatever output_desc said.
  std::mt19937_64 rng(16);
  tt::Run run(*layer, {tt::random_tensor({2, 16, 12}, kF32, rng)}, tt::random_params(*layer, kF32, rng),
              kF32);
  run.outputs = {Tensor({2, 9, s.hidden}, kF32)};
  run.state = layer->create_state(0);
  std::vector<DLTensor> in = tt::views(run.inputs), out = tt::views(run.outputs), par = tt::views(run.params);
  const plx_forward_args args = tt::forward_args(in, out, par, PLX_FORWARD_TRAINING);
  expect(tt::error_of([&] { layer->forward(*run.state, 0, args); }));
}

BOOST_AUTO_TEST_CASE(wrong_patch_dim) {
  const Patches s;
  Layer layer("vision.patch_embedding", s.options(), s.hidden);
  const std::string m = tt::error_of([&] { layer->output_desc({desc({2, 9, 4}, kF32)}); });
  BOOST_TEST(tt::mentions(m, "vision.patch_embedding"), m);
  BOOST_TEST(tt::mentions(m, "has 4 values per patch, but channels 3 x patch_size 2 x patch_size 2 = 12"), m);
  const std::string flat = tt::error_of([&] { layer->output_desc({desc({2, 108}, kF32)}); });
  BOOST_TEST(tt::mentions(flat, "expected shape [batch, patches, patch_dim] = [batch, 9, 12]"), flat);
}

BOOST_AUTO_TEST_CASE(missing_output_size) {
  const std::string m = creation_error("vision.projection", {{"ffn_hidden_size", 8}}, 6);
  BOOST_TEST(tt::mentions(m, "vision.projection"), m);
  BOOST_TEST(tt::mentions(m, "option output_size is required"), m);
}

BOOST_AUTO_TEST_CASE(bad_options) {
  const std::string channels = creation_error("vision.patch_embedding", {{"channels", 0}}, 4);
  BOOST_TEST(tt::mentions(channels, "option channels must be at least 1, got 0"), channels);
  const std::string act =
      creation_error("vision.projection", {{"output_size", 4}, {"activation", "relu"}}, 4);
  BOOST_TEST(tt::mentions(act, "option activation must be \"gelu\""), act);
  const std::string out = creation_error("vision.projection", {{"output_size", 0}}, 4);
  BOOST_TEST(tt::mentions(out, "option output_size must be at least 1, got 0"), out);
}

BOOST_AUTO_TEST_CASE(projection_input_width_and_count) {
  const Projector s;  // hidden 6
  Layer layer("vision.projection", s.options(), s.hidden);
  const std::string width = tt::error_of([&] { layer->output_desc({desc({2, 9, 7}, kF32)}); });
  BOOST_TEST(tt::mentions(width, "vision.projection"), width);
  BOOST_TEST(tt::mentions(width, "model.hidden_size 6"), width);
  BOOST_TEST(tt::mentions(width, "got [2, 9, 7]"), width);
  // Exactly one input: hidden states and targets (a head's inputs) are refused.
  const std::string two = tt::error_of([&] {
    layer->output_desc({desc({2, 9, s.hidden}, kF32), desc({2, 9}, plx_dtype_i32())});
  });
  BOOST_TEST(tt::mentions(two, "takes 1 input(s) and 1 output, got 2"), two);
}

BOOST_AUTO_TEST_CASE(cuda_devices) {
  for (const char* name : {"vision.patch_embedding", "vision.projection"}) {
    boost::json::object options;
    if (std::string(name) == "vision.projection") options["output_size"] = 4;
    const std::string m = creation_error(name, options, 4, DLDevice{kDLCUDA, 0});
    BOOST_TEST(tt::mentions(m, std::string(name) + " runs on the CPU only (cuda:0 requested)"), m);
  }
}

BOOST_AUTO_TEST_CASE(unsupported_dtypes) {
  const Patches s;
  Layer patch("vision.patch_embedding", s.options(), s.hidden);
  std::mt19937_64 rng(17);
  // bfloat16 activations: the CPU path has none.
  std::vector<Tensor> inputs = {pixels(s, 1, kF32, rng)};
  std::vector<Tensor> params = tt::random_params(*patch, kF32, rng);
  std::vector<Tensor> outputs = {Tensor({1, s.count(), s.hidden}, kF32)};
  std::vector<DLTensor> in = tt::views(inputs), out = tt::views(outputs), par = tt::views(params);
  out[0].dtype = plx_dtype_bf16();
  const plx_forward_args args = tt::forward_args(in, out, par, 0);
  auto state = patch->create_state(0);
  const std::string m = tt::error_of([&] { patch->forward(*state, 0, args); });
  BOOST_TEST(tt::mentions(m, "vision.patch_embedding: output 0 (patch embeddings)"), m);
  BOOST_TEST(tt::mentions(m, "got bfloat16"), m);
  // Integer pixels.
  const std::string ints = tt::error_of([&] {
    patch->output_desc({desc({1, s.count(), s.dim()}, plx_dtype_i32())});
  });
  BOOST_TEST(tt::mentions(ints, "input 0 (pixels): expected dtype float32 or float64"), ints);
}

BOOST_AUTO_TEST_CASE(backward_needs_a_training_forward) {
  const Projector s;
  Layer layer("vision.projection", s.options(), s.hidden);
  std::mt19937_64 rng(18);
  tt::Run run(*layer, {tt::random_tensor({1, 2, s.hidden}, kF64, rng)}, tt::random_params(*layer, kF64, rng),
              kF64);
  run.forward(false);
  std::vector<Tensor> go = {tt::random_tensor({1, 2, s.out}, kF64, rng)},
                      gi = {Tensor({1, 2, s.hidden}, kF64)}, gp;
  for (const Tensor& p : run.params) gp.emplace_back(p.shape, kF64);
  const std::string m = tt::error_of([&] { run.backward(go, gi, gp); });
  BOOST_TEST(tt::mentions(m, "vision.projection: backward without a training forward"), m);
}

BOOST_AUTO_TEST_SUITE_END()

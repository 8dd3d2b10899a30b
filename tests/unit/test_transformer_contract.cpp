// The transformer plugin against its contract (plugins/transformer/README.md): parameter specs and
// checkpoint names, outputs equal to a naive float64 re-implementation written here directly from
// the contract's formulas (so the [out, in] weight layout, Megatron's grouped qkv rows, rotate-half
// RoPE, the causal mask and the ignored targets are all pinned), float32 against float64, the
// FLOP estimates, and the errors for bad input.
#define BOOST_TEST_MODULE transformer_contract
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "plexus/core/run_config.hpp"
#include "test_transformer_support.hpp"

namespace {

using tt::Tensor;
using Vec = std::vector<double>;

const DLDataType kF64 = plx_dtype_f64();
const DLDataType kF32 = plx_dtype_f32();

// ---------------------------------------------------------------------------------------------
// The naive reference: loops straight from the contract, float64, no shared code with the plugin.

struct Ref {
  const tt::Model& m;

  bool rms() const { return m.normalization == "RMSNorm"; }

  // One row of C values.
  Vec norm(const double* x, const Vec& w, const Vec& b) const {
    const auto c = static_cast<std::size_t>(m.hidden_size);
    Vec y(c);
    double mean = 0, ms = 0;
    for (std::size_t i = 0; i < c; ++i) mean += x[i] / static_cast<double>(c);
    if (rms()) {
      for (std::size_t i = 0; i < c; ++i) ms += x[i] * x[i] / static_cast<double>(c);
      for (std::size_t i = 0; i < c; ++i) y[i] = x[i] / std::sqrt(ms + m.layernorm_epsilon) * w[i];
    } else {
      double var = 0;
      for (std::size_t i = 0; i < c; ++i) var += (x[i] - mean) * (x[i] - mean) / static_cast<double>(c);
      for (std::size_t i = 0; i < c; ++i)
        y[i] = (x[i] - mean) / std::sqrt(var + m.layernorm_epsilon) * w[i] + b[i];
    }
    return y;
  }

  // y = x W^T for one row, W stored [out, in].
  static Vec linear(const Vec& x, const Vec& w, std::size_t out) {
    const std::size_t in = x.size();
    Vec y(out, 0.0);
    for (std::size_t o = 0; o < out; ++o)
      for (std::size_t i = 0; i < in; ++i) y[o] += x[i] * w[o * in + i];
    return y;
  }

  void rope(double* v, std::size_t hd, std::size_t pos) const {
    const std::size_t h = hd / 2;
    for (std::size_t i = 0; i < h; ++i) {
      const double inv_freq =
          std::pow(m.rotary_base, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
      const double angle = static_cast<double>(pos) * inv_freq;
      const double a = v[i], b = v[i + h];
      v[i] = a * std::cos(angle) - b * std::sin(angle);
      v[i + h] = b * std::cos(angle) + a * std::sin(angle);
    }
  }

  // params: norm weight, [norm bias], qkv, proj.
  Vec attention(const Vec& x, int64_t batch, int64_t seq, const std::vector<Vec>& p) const {
    const auto C = static_cast<std::size_t>(m.hidden_size),
               nh = static_cast<std::size_t>(m.num_attention_heads),
               ng = static_cast<std::size_t>(m.num_query_groups), hd = C / nh, per = nh / ng;
    const auto B = static_cast<std::size_t>(batch), S = static_cast<std::size_t>(seq);
    const Vec& w = p[0];
    const Vec b = rms() ? Vec{} : p[1];
    const Vec& wqkv = p[rms() ? 1 : 2];
    const Vec& wproj = p[rms() ? 2 : 3];
    const std::size_t rows = (nh + 2 * ng) * hd;
    Vec f(B * S * C, 0.0);
    for (std::size_t bi = 0; bi < B; ++bi) {
      // q[s][h][d], k[s][g][d], v[s][g][d]
      std::vector<Vec> q(S, Vec(nh * hd)), k(S, Vec(ng * hd)), v(S, Vec(ng * hd));
      for (std::size_t s = 0; s < S; ++s) {
        const Vec u = norm(&x[(bi * S + s) * C], w, b);
        const Vec qkv = linear(u, wqkv, rows);
        for (std::size_t g = 0; g < ng; ++g) {
          const std::size_t group = g * (per + 2) * hd;  // Megatron: [q heads of g..., k_g, v_g]
          for (std::size_t j = 0; j < per; ++j)
            for (std::size_t d = 0; d < hd; ++d) q[s][(g * per + j) * hd + d] = qkv[group + j * hd + d];
          for (std::size_t d = 0; d < hd; ++d) {
            k[s][g * hd + d] = qkv[group + per * hd + d];
            v[s][g * hd + d] = qkv[group + (per + 1) * hd + d];
          }
        }
        for (std::size_t h = 0; h < nh; ++h) rope(&q[s][h * hd], hd, s);
        for (std::size_t g = 0; g < ng; ++g) rope(&k[s][g * hd], hd, s);
      }
      for (std::size_t s = 0; s < S; ++s) {
        Vec o(nh * hd, 0.0);
        for (std::size_t h = 0; h < nh; ++h) {
          const std::size_t g = h / per;
          Vec score(s + 1);
          double mx = -1e300;
          for (std::size_t t = 0; t <= s; ++t) {  // causal: keys t <= s
            double dot = 0;
            for (std::size_t d = 0; d < hd; ++d) dot += q[s][h * hd + d] * k[t][g * hd + d];
            score[t] = dot / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, score[t]);
          }
          double sum = 0;
          for (double& e : score) sum += (e = std::exp(e - mx));
          for (std::size_t t = 0; t <= s; ++t)
            for (std::size_t d = 0; d < hd; ++d) o[h * hd + d] += score[t] / sum * v[t][g * hd + d];
        }
        const Vec out = linear(o, wproj, C);
        for (std::size_t c = 0; c < C; ++c) f[(bi * S + s) * C + c] = out[c];
      }
    }
    return f;
  }

  Vec mlp(const Vec& x, int64_t rows_, const std::vector<Vec>& p) const {
    const auto C = static_cast<std::size_t>(m.hidden_size), F = static_cast<std::size_t>(m.ffn_hidden_size);
    const auto rows = static_cast<std::size_t>(rows_);
    const bool swiglu = m.activation == "swiglu";
    const Vec& w = p[0];
    const Vec b = rms() ? Vec{} : p[1];
    const Vec& w1 = p[rms() ? 1 : 2];
    const Vec& w2 = p[rms() ? 2 : 3];
    Vec f(rows * C);
    for (std::size_t r = 0; r < rows; ++r) {
      const Vec a = linear(norm(&x[r * C], w, b), w1, swiglu ? 2 * F : F);
      Vec act(F);
      for (std::size_t i = 0; i < F; ++i) {
        if (swiglu)
          act[i] = a[i] / (1 + std::exp(-a[i])) * a[F + i];  // silu(gate) * up
        else
          act[i] = 0.5 * a[i] * (1 + std::erf(a[i] / std::sqrt(2.0)));
      }
      const Vec out = linear(act, w2, C);
      for (std::size_t c = 0; c < C; ++c) f[r * C + c] = out[c];
    }
    return f;
  }

  Vec final_norm(const Vec& x, int64_t rows, const std::vector<Vec>& p) const {
    const auto C = static_cast<std::size_t>(m.hidden_size);
    Vec y;
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
      const Vec row = norm(&x[r * C], p[0], rms() ? Vec{} : p[1]);
      y.insert(y.end(), row.begin(), row.end());
    }
    return y;
  }

  // Returns the loss; fills logits.
  double head(const Vec& h, const std::vector<int32_t>& targets, const Vec& w, Vec& logits) const {
    const auto C = static_cast<std::size_t>(m.hidden_size), V = static_cast<std::size_t>(m.vocab_size);
    logits.clear();
    double sum = 0;
    int count = 0;
    for (std::size_t r = 0; r < targets.size(); ++r) {
      const Vec row = linear(Vec(h.begin() + static_cast<std::ptrdiff_t>(r * C),
                                 h.begin() + static_cast<std::ptrdiff_t>((r + 1) * C)),
                             w, V);
      logits.insert(logits.end(), row.begin(), row.end());
      if (targets[r] == -1) continue;
      double z = 0;
      for (double l : row) z += std::exp(l);
      sum += std::log(z) - row[static_cast<std::size_t>(targets[r])];
      ++count;
    }
    return count ? sum / count : 0.0;
  }
};

std::vector<Vec> values(const std::vector<Tensor>& ts) {
  std::vector<Vec> out;
  for (const Tensor& t : ts) out.push_back(t.values());
  return out;
}

// max |a - b| <= tol * max(1e-300, max |b|)
void expect_close(const Vec& a, const Vec& b, double tol, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(a.size() == b.size());
    double err = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      err = std::max(err, std::abs(a[i] - b[i]));
      scale = std::max(scale, std::abs(b[i]));
    }
    BOOST_TEST_MESSAGE(what << ": max |diff| " << err << " over max |value| " << scale);
    BOOST_TEST(scale > 0.0);
    BOOST_TEST(err <= tol * scale);
  }
}

std::vector<int32_t> random_ids(std::size_t n, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(n);
  for (int32_t& v : ids) v = id(rng);
  return ids;
}

tt::Model small(const std::string& norm = "RMSNorm", const std::string& act = "gelu", int64_t groups = 3) {
  tt::Model m;
  m.normalization = norm;
  m.activation = act;
  m.num_query_groups = groups;
  return m;
}

// A larger model whose sequences span two of the attention kernel's 64-row query blocks.
tt::Model larger(const std::string& norm, const std::string& act, int64_t heads, int64_t groups) {
  tt::Model m;
  m.hidden_size = 32;
  m.num_attention_heads = heads;
  m.num_query_groups = groups;
  m.ffn_hidden_size = 48;
  m.vocab_size = 37;
  m.seq_length = 80;
  m.normalization = norm;
  m.activation = act;
  return m;
}

// Forward of `component` in float64 on random inputs, compared with the reference.
void expect_matches_reference(const std::string& component, const tt::Model& m, int64_t batch, int64_t seq,
                              uint64_t seed) {
  BOOST_TEST_CONTEXT(component << " " << m.normalization << " " << m.activation << " nh "
                               << m.num_attention_heads << " ng " << m.num_query_groups << " S " << seq) {
    tt::Layer layer(component, m);
    std::mt19937_64 rng(seed);
    std::vector<Tensor> params = tt::random_params(*layer, kF64, rng);
    const Ref ref{m};
    const int64_t rows = batch * seq;
    // The reference is an independent float64 computation: only rounding separates them.
    constexpr double kTol = 1e-12;
    if (component == "transformer.embedding") {
      const std::vector<int32_t> ids = random_ids(static_cast<std::size_t>(rows), m.vocab_size, rng);
      tt::Run run(*layer, {Tensor::ints({batch, seq}, ids)}, params, kF64);
      const Vec y = run.forward()[0].values();
      Vec expected;
      const Vec w = params[0].values();
      for (int32_t id : ids)
        for (int64_t c = 0; c < m.hidden_size; ++c)
          expected.push_back(w[static_cast<std::size_t>(id * m.hidden_size + c)]);
      BOOST_TEST(y == expected, boost::test_tools::per_element());
      return;
    }
    const Tensor x = tt::random_tensor({batch, seq, m.hidden_size}, kF64, rng);
    if (component == "transformer.lm_head") {
      std::vector<int32_t> targets = random_ids(static_cast<std::size_t>(rows), m.vocab_size, rng);
      targets[1] = -1;
      tt::Run run(*layer, {x, Tensor::ints({batch, seq}, targets)}, params, kF64);
      std::vector<Tensor>& out = run.forward();
      Vec logits;
      const double loss = ref.head(x.values(), targets, params[0].values(), logits);
      BOOST_TEST(out[0].numel() == 1);
      BOOST_TEST(out[0].get(0) == loss, boost::test_tools::tolerance(kTol));
      expect_close(out[1].values(), logits, kTol, "logits");
      return;
    }
    tt::Run run(*layer, {x}, params, kF64);
    const Vec y = run.forward()[0].values();
    Vec expected;
    if (component == "transformer.attention")
      expected = ref.attention(x.values(), batch, seq, values(params));
    if (component == "transformer.mlp") expected = ref.mlp(x.values(), rows, values(params));
    if (component == "transformer.norm") expected = ref.final_norm(x.values(), rows, values(params));
    expect_close(y, expected, kTol, "output");
    // An inference forward (no PLX_FORWARD_TRAINING) computes the same thing without keeping state.
    tt::Run inference(*layer, {x}, params, kF64);
    expect_close(inference.forward(false)[0].values(), expected, kTol, "inference output");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(specs)

BOOST_AUTO_TEST_CASE(parameters_names_shapes_init_and_flags) {
  tt::Model m = small("LayerNorm", "swiglu", 1);  // C 12, nh 3, ng 1, F 10, V 11, L 2
  m.init_method_std = 0.02;
  const double scaled = 0.02 / std::sqrt(2.0 * 2);
  struct Expect {
    const char* name;
    std::vector<int64_t> shape;
    uint32_t init;
    double std_dev;
    uint32_t flags;
    // Tensor parallelism (ABI 1.8): the dimension split over tp (-1: whole on every rank) and
    // the whole parts along it (empty: one).
    int32_t tp_dim = -1;
    std::vector<int64_t> parts = {};
  };
  const auto check = [](const std::string& component, const tt::Model& model,
                        const std::vector<Expect>& expected) {
    BOOST_TEST_CONTEXT(component << " " << model.normalization) {
      tt::Layer layer(component, model);
      const plx_layer_info info = layer->info();
      BOOST_TEST_REQUIRE(info.num_params == expected.size());
      BOOST_TEST(info.num_stages == 1u);
      BOOST_TEST(std::string(layer->stage(0).name) == component);
      BOOST_TEST(layer->stage(0).kind == static_cast<uint32_t>(PLX_STAGE_COMPUTE));
      for (uint32_t i = 0; i < info.num_params; ++i) {
        const plx_param_spec p = layer->param(i);
        BOOST_TEST_CONTEXT("parameter " << i) {
          BOOST_TEST(std::string(p.name) == expected[i].name);
          BOOST_TEST(std::vector<int64_t>(p.desc.dims, p.desc.dims + p.desc.ndim) == expected[i].shape,
                     boost::test_tools::per_element());
          BOOST_TEST(plx_dtype_equal(p.desc.dtype, plx_dtype_f32()));
          BOOST_TEST(p.init == expected[i].init);
          if (p.init == PLX_INIT_NORMAL)
            BOOST_TEST(p.init_a == expected[i].std_dev, boost::test_tools::tolerance(1e-15));
          const uint32_t split = expected[i].tp_dim >= 0 ? uint32_t{PLX_PARAM_TENSOR_PARALLEL} : 0u;
          BOOST_TEST(p.flags == (expected[i].flags | split));
          if (split != 0) {
            BOOST_TEST(p.tp_dim == expected[i].tp_dim);
            BOOST_TEST(
                std::vector<int64_t>(p.tp_part_sizes, p.tp_part_sizes + p.tp_num_parts) == expected[i].parts,
                boost::test_tools::per_element());
          }
          // Megatron's Transformer Engine spec fuses each pre-norm into the linear after it.
          const std::string name = p.name;
          const std::string te = p.te_name == nullptr ? "" : p.te_name;
          if (name.starts_with("input_layernorm."))
            BOOST_TEST(te == "self_attention.linear_qkv.layer_norm_" + name.substr(16));
          else if (name.starts_with("pre_mlp_layernorm."))
            BOOST_TEST(te == "mlp.linear_fc1.layer_norm_" + name.substr(18));
          else
            BOOST_TEST(te.empty(), name << " has one spelling");
        }
      }
    }
  };
  const uint32_t nd = PLX_PARAM_NO_WEIGHT_DECAY;
  // The embedding's and the head's rows are the padded vocabulary (PLX_PARAM_VOCABULARY).
  const uint32_t vocabulary = PLX_PARAM_VOCABULARY;
  check("transformer.embedding", m,
        {{"embedding.word_embeddings.weight", {11, 12}, PLX_INIT_NORMAL, 0.02, vocabulary, 0}});
  // hd = 4; (nh + 2 ng) hd = (3 + 2) * 4 = 20 qkv rows.
  check("transformer.attention", m,
        {{"input_layernorm.weight", {12}, PLX_INIT_ONES, 0, nd},
         {"input_layernorm.bias", {12}, PLX_INIT_ZEROS, 0, nd},
         {"self_attention.linear_qkv.weight", {20, 12}, PLX_INIT_NORMAL, 0.02, 0, 0},
         {"self_attention.linear_proj.weight", {12, 12}, PLX_INIT_NORMAL, scaled, 0, 1}});
  // SwiGLU's fc1 is two parts, gate and up, each split over tp.
  check("transformer.mlp", m,
        {{"pre_mlp_layernorm.weight", {12}, PLX_INIT_ONES, 0, nd},
         {"pre_mlp_layernorm.bias", {12}, PLX_INIT_ZEROS, 0, nd},
         {"mlp.linear_fc1.weight", {20, 12}, PLX_INIT_NORMAL, 0.02, 0, 0, {10, 10}},
         {"mlp.linear_fc2.weight", {12, 10}, PLX_INIT_NORMAL, scaled, 0, 1}});
  check("transformer.norm", m,
        {{"weight", {12}, PLX_INIT_ONES, 0, nd}, {"bias", {12}, PLX_INIT_ZEROS, 0, nd}});
  check("transformer.lm_head", m,
        {{"embedding.word_embeddings.weight", {11, 12}, PLX_INIT_NORMAL, 0.02, vocabulary, 0}});

  tt::Model r = small("RMSNorm", "gelu", 3);
  check("transformer.attention", r,
        {{"input_layernorm.weight", {12}, PLX_INIT_ONES, 0, nd},
         {"self_attention.linear_qkv.weight", {36, 12}, PLX_INIT_NORMAL, 0.02, 0, 0},
         {"self_attention.linear_proj.weight", {12, 12}, PLX_INIT_NORMAL, scaled, 0, 1}});
  check("transformer.mlp", r,
        {{"pre_mlp_layernorm.weight", {12}, PLX_INIT_ONES, 0, nd},
         {"mlp.linear_fc1.weight", {10, 12}, PLX_INIT_NORMAL, 0.02, 0, 0},
         {"mlp.linear_fc2.weight", {12, 10}, PLX_INIT_NORMAL, scaled, 0, 1}});
  check("transformer.norm", r, {{"weight", {12}, PLX_INIT_ONES, 0, nd}});
  r.untie_embeddings_and_output_weights = true;
  check("transformer.lm_head", r, {{"output_layer.weight", {11, 12}, PLX_INIT_NORMAL, 0.02, vocabulary, 0}});
}

// The output projections' depth scaling counts the layers that add to the residual stream, which
// the engine passes in the create args from the stack's description (ABI 1.6); a host before 1.6
// leaves them 0, and the GPT rule, twice num_layers, applies.
BOOST_AUTO_TEST_CASE(output_projections_scale_by_the_residual_layers_of_the_create_args) {
  tt::Model m = small("RMSNorm", "gelu", 1);  // L 2
  m.init_method_std = 0.05;
  for (const auto& [component, projection] :
       {std::pair{"transformer.attention", "self_attention.linear_proj.weight"},
        std::pair{"transformer.mlp", "mlp.linear_fc2.weight"}}) {
    const tt::ComponentLayer given(tt::component(component), boost::json::object{}, "model.layer.options",
                                   m.json(), 2, DLDevice{kDLCPU, 0}, 9);
    BOOST_TEST(given->param(static_cast<uint32_t>(tt::param_index(*given, projection))).init_a == 0.05 / 3.0,
               boost::test_tools::tolerance(1e-15));
    const tt::ComponentLayer older(tt::component(component), boost::json::object{}, "model.layer.options",
                                   m.json(), 2, DLDevice{kDLCPU, 0});
    BOOST_TEST(older->param(static_cast<uint32_t>(tt::param_index(*older, projection))).init_a == 0.05 / 2.0,
               boost::test_tools::tolerance(1e-15));
  }
}

BOOST_AUTO_TEST_CASE(inputs_outputs_and_flags) {
  const tt::Model m = small();
  tt::Layer head("transformer.lm_head", m);
  const plx_layer_info info = head->info();
  BOOST_TEST(info.flags == static_cast<uint32_t>(PLX_LAYER_PRODUCES_LOSS | PLX_LAYER_CONTEXT_PARALLEL));
  BOOST_TEST(info.num_inputs == 2u);
  BOOST_TEST(info.num_outputs == 2u);
  std::vector<Tensor> in = {Tensor({2, 5, 12}, kF64), Tensor({2, 5}, plx_dtype_i32())};
  const auto out = head->output_desc(tt::descs(in));
  BOOST_TEST_REQUIRE(out.size() == 2u);
  BOOST_TEST(out[0].ndim == 1u);
  BOOST_TEST(out[0].dims[0] == 1);
  BOOST_TEST(plx_dtype_equal(out[0].dtype, kF64));  // follows the input dtype
  BOOST_TEST(out[1].ndim == 3u);
  BOOST_TEST(out[1].dims[2] == 11);
  for (const char* name : {"transformer.attention", "transformer.mlp", "transformer.norm"}) {
    tt::Layer layer(name, m);
    // Correct on a cp rank's chunks: token-local, or (attention) exchanging over cp itself.
    BOOST_TEST(layer->info().flags == static_cast<uint32_t>(PLX_LAYER_CONTEXT_PARALLEL));
    for (DLDataType dt : {kF32, kF64}) {
      std::vector<Tensor> x = {Tensor({3, 4, 12}, dt)};
      const auto d = layer->output_desc(tt::descs(x));
      BOOST_TEST(plx_dtype_equal(d.at(0).dtype, dt));
      BOOST_TEST(std::vector<int64_t>(d[0].dims, d[0].dims + d[0].ndim) == std::vector<int64_t>({3, 4, 12}),
                 boost::test_tools::per_element());
    }
  }
  tt::Layer emb("transformer.embedding", m);
  std::vector<Tensor> tokens = {Tensor({3, 4}, plx_dtype_i32())};
  const auto d = emb->output_desc(tt::descs(tokens));
  BOOST_TEST(std::vector<int64_t>(d.at(0).dims, d[0].dims + d[0].ndim) == std::vector<int64_t>({3, 4, 12}),
             boost::test_tools::per_element());
}

// bfloat16 hidden states are the CUDA path's mixed precision (run.precision = "bf16"). A
// description carries no device, so output_desc answers for them on every build: the hidden
// layers follow the input, the head gives float32 loss and logits (its softmax runs in fp32). The
// CPU's forward refuses them, naming the tensor and the dtype.
BOOST_AUTO_TEST_CASE(bf16_descriptions_and_the_cpu_refusal) {
  const tt::Model m = small();
  const DLDataType bf16 = plx_dtype_bf16();
  for (const char* name : {"transformer.attention", "transformer.mlp", "transformer.norm"}) {
    tt::Layer layer(name, m);
    std::vector<Tensor> x = {Tensor({3, 4, 12}, bf16)};
    const auto d = layer->output_desc(tt::descs(x));
    BOOST_TEST(plx_dtype_equal(d.at(0).dtype, bf16), name);
    std::mt19937_64 rng(3);
    const std::vector<Tensor> params = tt::random_params(*layer, kF32, rng);
    const std::string e = tt::error_of([&] {
      tt::Run run(*layer, {Tensor({3, 4, 12}, bf16)}, params, bf16);
      run.forward();
    });
    BOOST_TEST(
        (tt::mentions(e, "input 0") && tt::mentions(e, "float32 or float64") && tt::mentions(e, "bfloat16")),
        name << ": " << e);
  }
  tt::Layer head("transformer.lm_head", m);
  std::vector<Tensor> in = {Tensor({2, 5, 12}, bf16), Tensor({2, 5}, plx_dtype_i32())};
  const auto out = head->output_desc(tt::descs(in));
  BOOST_TEST_REQUIRE(out.size() == 2u);
  BOOST_TEST(plx_dtype_equal(out[0].dtype, kF32));
  BOOST_TEST(plx_dtype_equal(out[1].dtype, kF32));
  BOOST_TEST(out[1].dims[2] == 11);
}

BOOST_AUTO_TEST_CASE(flop_estimates) {
  tt::Model m = larger("RMSNorm", "swiglu", 4, 2);  // C 32, nh 4, ng 2, hd 8, F 48, V 37
  const double b = 2, s = 16, n = b * s;
  std::vector<Tensor> x = {Tensor({2, 16, 32}, kF32)};
  std::vector<Tensor> head_in = {Tensor({2, 16, 32}, kF32), Tensor({2, 16}, plx_dtype_i32())};
  std::vector<Tensor> tokens = {Tensor({2, 16}, plx_dtype_i32())};
  const auto att = tt::Layer("transformer.attention", m)->estimate_flops(tt::descs(x));
  BOOST_TEST_REQUIRE(att.has_value());
  const double qkv = 2 * n * 32 * (4 + 2 * 2) * 8, proj = 2 * n * 32 * 32,
               core = 2 * 2 * b * 4 * (s * (s + 1) / 2) * 8;  // causal pairs
  BOOST_TEST(att->forward == qkv + proj + core, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(att->backward == 2 * att->forward, boost::test_tools::tolerance(1e-12));
  // Bidirectional (attn_mask_type "no_mask"): the core multiplies over all S x S query-key pairs.
  const tt::ComponentLayer no_mask(
      tt::component("transformer.attention"), boost::json::object{{"attn_mask_type", "no_mask"}},
      "model.attention.options", m.json(), static_cast<uint32_t>(m.num_layers), DLDevice{kDLCPU, 0});
  const auto full = no_mask->estimate_flops(tt::descs(x));
  BOOST_TEST_REQUIRE(full.has_value());
  BOOST_TEST(full->forward == qkv + proj + 2 * 2 * b * 4 * (s * s) * 8, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(full->backward == 2 * full->forward, boost::test_tools::tolerance(1e-12));
  const auto mlp = tt::Layer("transformer.mlp", m)->estimate_flops(tt::descs(x));
  BOOST_TEST_REQUIRE(mlp.has_value());
  BOOST_TEST(mlp->forward == 2 * n * 32 * 96 + 2 * n * 48 * 32, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(mlp->backward == 2 * mlp->forward, boost::test_tools::tolerance(1e-12));
  const auto head = tt::Layer("transformer.lm_head", m)->estimate_flops(tt::descs(head_in));
  BOOST_TEST_REQUIRE(head.has_value());
  BOOST_TEST(head->forward == 2 * n * 32 * 37, boost::test_tools::tolerance(1e-12));
  const auto norm = tt::Layer("transformer.norm", m)->estimate_flops(tt::descs(x));
  const auto emb = tt::Layer("transformer.embedding", m)->estimate_flops(tt::descs(tokens));
  BOOST_TEST_REQUIRE((norm.has_value() && emb.has_value()));  // known: no matrix products
  BOOST_TEST(norm->forward == 0.0);
  BOOST_TEST(emb->forward == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(reference)

BOOST_AUTO_TEST_CASE(every_component_matches_the_contract_formulas) {
  uint64_t seed = 100;
  for (const char* norm : {"RMSNorm", "LayerNorm"}) {
    for (int64_t groups : {3, 1})
      expect_matches_reference("transformer.attention", small(norm, "gelu", groups), 2, 5, ++seed);
    for (const char* act : {"gelu", "swiglu"})
      expect_matches_reference("transformer.mlp", small(norm, act, 3), 2, 5, ++seed);
    expect_matches_reference("transformer.norm", small(norm, "gelu", 3), 2, 5, ++seed);
  }
  expect_matches_reference("transformer.embedding", small(), 2, 5, ++seed);
  tt::Model untied = small();
  untied.untie_embeddings_and_output_weights = true;
  expect_matches_reference("transformer.lm_head", small(), 2, 5, ++seed);
  expect_matches_reference("transformer.lm_head", untied, 2, 5, ++seed);
}

// Sequences longer than the attention kernel's 64-row query block, several groups of heads.
BOOST_AUTO_TEST_CASE(long_sequences_and_grouped_heads) {
  expect_matches_reference("transformer.attention", larger("RMSNorm", "gelu", 4, 2), 2, 70, 201);
  expect_matches_reference("transformer.attention", larger("LayerNorm", "gelu", 8, 1), 1, 65, 202);
  expect_matches_reference("transformer.mlp", larger("RMSNorm", "swiglu", 4, 2), 2, 70, 203);
}

// The qkv rows by hand: nh 4, ng 2 (2 query heads per group), hd 4. Only the value rows of group 1
// are non-zero, so q = k = 0: every causal score is 0 and position s averages the values of
// positions 0..s. With linear_proj = identity, f = o, head-major. Heads 0 and 1 (group 0) must be
// exactly 0; heads 2 and 3 (group 1) the running mean of u Wv^T.
BOOST_AUTO_TEST_CASE(megatron_qkv_grouping_and_head_major_output) {
  tt::Model m = small("RMSNorm", "gelu", 2);
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  tt::Layer layer("transformer.attention", m);
  std::mt19937_64 rng(7);
  const int64_t C = 16, hd = 4, S = 5;
  std::vector<Tensor> params = tt::random_params(*layer, kF64, rng);
  params[0].fill(1.0);       // norm weight
  Tensor& wqkv = params[1];  // [(4 + 2 * 2) * 4 = 32, 16]
  BOOST_TEST_REQUIRE(wqkv.shape[0] == 32);
  const int64_t v1 = (1 * 4 + 3) * hd;  // group 1 = rows 16..31: q(h2), q(h3), k1, v1
  for (int64_t r = 0; r < 32; ++r)
    if (r < v1 || r >= v1 + hd)
      for (int64_t c = 0; c < C; ++c) wqkv.set(static_cast<std::size_t>(r * C + c), 0.0);
  params[2].fill(0.0);
  for (int64_t c = 0; c < C; ++c) params[2].set(static_cast<std::size_t>(c * C + c), 1.0);
  const Tensor x = tt::random_tensor({1, S, C}, kF64, rng);
  tt::Run run(*layer, {x}, params, kF64);
  const Vec f = run.forward()[0].values();

  const Ref ref{m};
  const Vec xv = x.values(), wv = wqkv.values();
  Vec running(static_cast<std::size_t>(hd), 0.0);
  for (int64_t s = 0; s < S; ++s) {
    const Vec u = ref.norm(&xv[static_cast<std::size_t>(s * C)], Vec(16, 1.0), {});
    for (int64_t d = 0; d < hd; ++d) {
      double vd = 0;
      for (int64_t c = 0; c < C; ++c)
        vd += u[static_cast<std::size_t>(c)] * wv[static_cast<std::size_t>((v1 + d) * C + c)];
      running[static_cast<std::size_t>(d)] += vd;
    }
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < hd; ++d) {
        const double got = f[static_cast<std::size_t>(s * C + h * hd + d)];
        const double expected =
            h < 2 ? 0.0 : running[static_cast<std::size_t>(d)] / static_cast<double>(s + 1);
        BOOST_TEST(got == expected, boost::test_tools::tolerance(1e-12));
        if (h < 2) BOOST_TEST(got == 0.0);
      }
  }
}

// Tied head: the layer reads the weight it is given as [V, C] rows (logits[v] = h . W[v]).
BOOST_AUTO_TEST_CASE(head_weight_rows_are_vocabulary_entries_and_ignored_targets) {
  const tt::Model m = small();
  tt::Layer layer("transformer.lm_head", m);
  std::vector<Tensor> params = {Tensor({11, 12}, kF64)};
  params[0].set(3 * 12 + 5, 2.0);  // only W[3, 5] != 0
  Tensor h({1, 2, 12}, kF64);
  h.set(5, 1.5);  // token 0: h[5] = 1.5, so logits[0, 3] = 3
  tt::Run run(*layer, {h, Tensor::ints({1, 2}, {3, -1})}, params, kF64);
  std::vector<Tensor>& out = run.forward();
  for (int64_t v = 0; v < 11; ++v)
    BOOST_TEST(out[1].get(static_cast<std::size_t>(v)) == (v == 3 ? 3.0 : 0.0));
  // Only token 0 counts: loss = log(10 + e^3) - 3.
  BOOST_TEST(out[0].get(0) == std::log(10.0 + std::exp(3.0)) - 3.0, boost::test_tools::tolerance(1e-14));
  // All targets ignored: the loss is 0 and so are the gradients.
  tt::Run none(*layer, {h, Tensor::ints({1, 2}, {-1, -1})}, params, kF64);
  BOOST_TEST(none.forward()[0].get(0) == 0.0);
  std::vector<Tensor> go = {Tensor({1}, kF64), none.outputs[1]};
  go[0].set(0, 1.0);
  go[1].null_data = true;
  std::vector<Tensor> gi = {Tensor({1, 2, 12}, kF64), Tensor({1, 2}, plx_dtype_i32())};
  gi[0].fill(5.0);
  gi[1].null_data = true;
  std::vector<Tensor> pg = {Tensor({11, 12}, kF64)};
  none.backward(go, gi, pg);
  for (double v : gi[0].values()) BOOST_TEST(v == 0.0);
  for (double v : pg[0].values()) BOOST_TEST(v == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(precision)

// float32 against float64 on the same (float32-representable) inputs and parameters. Tolerance
// 1e-5 of the output's largest magnitude: float32 rounds at 6e-8, the sums here have at most a
// few hundred terms (error ~ sqrt(n) * 6e-8 ~ 1e-6), and the fp32 exp/erf approximations are
// within 1e-7; an fp32 path computing something else would be off by far more.
BOOST_AUTO_TEST_CASE(float32_matches_float64) {
  uint64_t seed = 300;
  const auto compare = [&](const std::string& component, const tt::Model& m, int64_t batch, int64_t seq) {
    BOOST_TEST_CONTEXT(component << " " << m.normalization << " " << m.activation << " S " << seq) {
      tt::Layer layer(component, m);
      std::mt19937_64 rng(++seed);
      std::vector<Tensor> p32 = tt::random_params(*layer, kF32, rng);
      std::vector<Tensor> in32;
      const auto rows = static_cast<std::size_t>(batch * seq);
      if (component == "transformer.embedding") {
        in32.push_back(Tensor::ints({batch, seq}, random_ids(rows, m.vocab_size, rng)));
      } else {
        in32.push_back(tt::random_tensor({batch, seq, m.hidden_size}, kF32, rng));
        if (component == "transformer.lm_head") {
          std::vector<int32_t> t = random_ids(rows, m.vocab_size, rng);
          t[0] = -1;
          in32.push_back(Tensor::ints({batch, seq}, t));
        }
      }
      std::vector<Tensor> p64, in64;
      for (const Tensor& t : p32) p64.push_back(t.as(kF64));
      for (const Tensor& t : in32) in64.push_back(t.is_float() ? t.as(kF64) : t);
      tt::Run r32(*layer, in32, p32, kF32), r64(*layer, in64, p64, kF64);
      std::vector<Tensor>& o32 = r32.forward();
      std::vector<Tensor>& o64 = r64.forward();
      BOOST_TEST(plx_dtype_equal(o32[0].dtype, kF32));
      for (std::size_t i = 0; i < o64.size(); ++i)
        expect_close(o32[i].values(), o64[i].values(), 1e-5, "output " + std::to_string(i));
    }
  };
  for (const char* norm : {"RMSNorm", "LayerNorm"}) {
    compare("transformer.attention", larger(norm, "gelu", 4, 2), 2, 70);
    compare("transformer.mlp", larger(norm, "gelu", 4, 4), 2, 70);
    compare("transformer.mlp", larger(norm, "swiglu", 4, 4), 2, 70);
    compare("transformer.norm", larger(norm, "gelu", 4, 4), 2, 70);
  }
  compare("transformer.embedding", larger("RMSNorm", "gelu", 4, 4), 2, 70);
  compare("transformer.lm_head", larger("RMSNorm", "gelu", 4, 4), 2, 70);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(bad_model_settings_are_refused_at_create) {
  tt::Model m = small();
  m.num_attention_heads = 5;  // 12 % 5 != 0
  std::string e = tt::error_of([&] { tt::Layer("transformer.attention", m); });
  BOOST_TEST((tt::mentions(e, "hidden_size (12)") && tt::mentions(e, "num_attention_heads (5)")), e);

  m = small();
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.num_query_groups = 3;  // 4 % 3 != 0
  e = tt::error_of([&] { tt::Layer("transformer.attention", m); });
  BOOST_TEST((tt::mentions(e, "num_attention_heads (4)") && tt::mentions(e, "num_query_groups (3)")), e);

  m = small();
  m.num_attention_heads = 4;  // hd = 3: RoPE needs an even head dim
  m.num_query_groups = 4;
  e = tt::error_of([&] { tt::Layer("transformer.attention", m); });
  BOOST_TEST((tt::mentions(e, "= 3") && tt::mentions(e, "even")), e);

  m = small();
  m.normalization = "BatchNorm";
  e = tt::error_of([&] { tt::Layer("transformer.norm", m); });
  BOOST_TEST(tt::mentions(e, "BatchNorm"), e);

  m = small();
  m.activation = "relu";
  e = tt::error_of([&] { tt::Layer("transformer.mlp", m); });
  BOOST_TEST(tt::mentions(e, "relu"), e);

  // model.attention_backend: flash is a GPU kernel, refused on the CPU; an unknown name is named.
  m = small();
  m.attention_backend = "flash";
  e = tt::error_of([&] { tt::Layer("transformer.attention", m); });
  BOOST_TEST((tt::mentions(e, "model.attention_backend") && tt::mentions(e, "GPU")), e);
  m.attention_backend = "cudnn";
  e = tt::error_of([&] { tt::Layer("transformer.attention", m); });
  BOOST_TEST((tt::mentions(e, "model.attention_backend") && tt::mentions(e, "\"cudnn\"")), e);
  m.attention_backend = "unfused";
  BOOST_CHECK_NO_THROW(tt::Layer("transformer.attention", m));

  // model.position_embedding_type: an unknown one is named; learned absolute positions with MTP
  // depths are refused (Megatron rolls the positions with the tokens); otherwise they are
  // Megatron's embedding.position_embeddings.weight [seq_length, C].
  m = small();
  m.position_embedding_type = "alibi";
  e = tt::error_of([&] { tt::Layer("transformer.embedding", m); });
  BOOST_TEST((tt::mentions(e, "model.position_embedding_type") && tt::mentions(e, "\"alibi\"")), e);
  m.position_embedding_type = "learned_absolute";
  {
    tt::Layer embedding("transformer.embedding", m);
    BOOST_TEST_REQUIRE(embedding->info().num_params == 2u);
    const plx_param_spec pos = embedding->param(1);
    BOOST_TEST(std::string(pos.name) == "embedding.position_embeddings.weight");
    BOOST_TEST(pos.desc.dims[0] == m.seq_length);
    BOOST_TEST(pos.desc.dims[1] == m.hidden_size);
  }
  boost::json::object with_mtp = m.json();
  with_mtp["mtp_num_layers"] = 1;
  e = tt::error_of([&] {
    tt::ComponentLayer(tt::component("transformer.embedding"), boost::json::object{}, "model.layer.options",
                       with_mtp, static_cast<uint32_t>(m.num_layers), DLDevice{kDLCPU, 0});
  });
  BOOST_TEST((tt::mentions(e, "learned_absolute") && tt::mentions(e, "mtp_num_layers")), e);

  // A device kind the plugin has no code for (CUDA is built in where the toolkit was found).
  e = tt::error_of([&] { tt::Layer("transformer.mlp", small(), kDLROCM); });
  BOOST_TEST(tt::mentions(e, "CPU"), e);
  BOOST_TEST(tt::mentions(e, "device type " + std::to_string(static_cast<int>(kDLROCM))), e);
}

// transformer.attention's option attn_mask_type (Megatron-LM's AttnMaskType): "causal" by default,
// in the component's schema; an unknown value is refused by the host's validation and, for a
// caller that skips it, by the layer, both naming the option; "no_mask" on a CUDA device is
// refused naming the option (the CUDA attention kernels are causal), before any GPU is looked
// for, so a CUDA build checks it without one (a build without CUDA refuses the device first).
// Its refusal under context parallelism is checked with a real cp group, in
// tests/mpi/test_context_parallel_attention.cpp.
BOOST_AUTO_TEST_CASE(attn_mask_type_option) {
  const plexus::Component& attention = tt::component("transformer.attention");
  BOOST_TEST(
      plexus::validated_component_options(attention, boost::json::object{}, "model.attention.options") ==
      boost::json::parse(R"({"attn_mask_type": "causal"})"));
  BOOST_TEST(plexus::validated_component_options(
                 attention, boost::json::parse(R"({"attn_mask_type": "no_mask"})"),
                 "model.attention.options") == boost::json::parse(R"({"attn_mask_type": "no_mask"})"));
  std::string e = tt::error_of([&] {
    (void)plexus::validated_component_options(
        attention, boost::json::parse(R"({"attn_mask_type": "padding"})"), "model.attention.options");
  });
  BOOST_TEST((tt::mentions(e, "model.attention.options.attn_mask_type") && tt::mentions(e, "no_mask")), e);

  const tt::Model m = small();
  const auto create = [&](const char* mask, DLDevice device) {
    tt::ComponentLayer(attention, boost::json::object{{"attn_mask_type", mask}}, "model.attention.options",
                       m.json(), static_cast<uint32_t>(m.num_layers), device);
  };
  e = tt::error_of([&] { create("padding", DLDevice{kDLCPU, 0}); });
  BOOST_TEST((tt::mentions(e, "attn_mask_type") && tt::mentions(e, "\"padding\"")), e);
  BOOST_CHECK_NO_THROW(create("no_mask", DLDevice{kDLCPU, 0}));
  e = tt::error_of([&] { create("no_mask", DLDevice{kDLCUDA, 0}); });
  if (!tt::mentions(e, "built without CUDA"))
    BOOST_TEST((tt::mentions(e, "attn_mask_type") && tt::mentions(e, "\"no_mask\"") &&
                tt::mentions(e, "CPU only") && tt::mentions(e, "cuda:0")),
               e);
}

BOOST_AUTO_TEST_CASE(bad_tensors_are_refused_with_the_values_named) {
  const tt::Model m = small();
  tt::Layer att("transformer.attention", m);
  std::mt19937_64 rng(9);
  std::vector<Tensor> p64 = tt::random_params(*att, kF64, rng);

  // Integer hidden states.
  std::string e = tt::error_of([&] {
    tt::Run run(*att, {Tensor({2, 5, 12}, plx_dtype_i32())}, p64, kF64);
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "float32 or float64") && tt::mentions(e, "int32")), e);

  // float16 is refused in output_desc too.
  std::vector<Tensor> half = {Tensor({2, 5, 12}, plx_dtype(kDLFloat, 16))};
  e = tt::error_of([&] { (void)att->output_desc(tt::descs(half)); });
  BOOST_TEST(tt::mentions(e, "float16"), e);

  // float32 parameters with float64 activations.
  std::vector<Tensor> p32;
  for (const Tensor& t : p64) p32.push_back(t.as(kF32));
  e = tt::error_of([&] {
    tt::Run run(*att, {tt::random_tensor({2, 5, 12}, kF64, rng)}, p32, kF64);
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "input_layernorm.weight") && tt::mentions(e, "does not match")), e);

  // Wrong hidden size.
  std::vector<Tensor> wide = {Tensor({2, 5, 13}, kF64)};
  e = tt::error_of([&] { (void)att->output_desc(tt::descs(wide)); });
  BOOST_TEST((tt::mentions(e, "[batch, seq, 12]") && tt::mentions(e, "[2, 5, 13]")), e);

  // A parameter of the wrong shape.
  std::vector<Tensor> bad = p64;
  bad[1] = Tensor({36, 11}, kF64);
  e = tt::error_of([&] {
    tt::Run run(*att, {tt::random_tensor({2, 5, 12}, kF64, rng)}, bad, kF64);
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "linear_qkv") && tt::mentions(e, "[36, 12]") && tt::mentions(e, "[36, 11]")),
             e);

  // Longer than seq_length (8).
  e = tt::error_of([&] {
    tt::Run run(*att, {tt::random_tensor({1, 9, 12}, kF64, rng)}, p64, kF64);
    run.forward();
  });
  BOOST_TEST((tt::mentions(e, "9") && tt::mentions(e, "seq_length 8")), e);

  // Backward after an inference forward.
  e = tt::error_of([&] {
    tt::Run run(*att, {tt::random_tensor({2, 5, 12}, kF64, rng)}, p64, kF64);
    run.forward(false);
    std::vector<Tensor> go = {Tensor({2, 5, 12}, kF64)}, gi = {Tensor({2, 5, 12}, kF64)}, pg;
    for (const Tensor& t : p64) pg.emplace_back(t.shape, kF64);
    run.backward(go, gi, pg);
  });
  BOOST_TEST(tt::mentions(e, "PLX_FORWARD_TRAINING"), e);
}

BOOST_AUTO_TEST_CASE(out_of_range_ids_and_targets) {
  const tt::Model m = small();  // vocab_size 11
  tt::Layer emb("transformer.embedding", m);
  std::mt19937_64 rng(10);
  const std::vector<Tensor> pe = tt::random_params(*emb, kF64, rng);
  for (int32_t id : {11, -1}) {
    const std::string e = tt::error_of([&] {
      tt::Run run(*emb, {Tensor::ints({1, 3}, {0, id, 2})}, pe, kF64);
      run.forward();
    });
    BOOST_TEST((tt::mentions(e, "token id " + std::to_string(id)) && tt::mentions(e, "vocab_size 11") &&
                tt::mentions(e, "[0, 1]")),
               e);
  }
  std::vector<Tensor> wrong_ids = {Tensor({1, 3}, plx_dtype_i64())};
  std::string e = tt::error_of([&] { (void)emb->output_desc(tt::descs(wrong_ids)); });
  BOOST_TEST(tt::mentions(e, "int32"), e);

  tt::Layer head("transformer.lm_head", m);
  const std::vector<Tensor> ph = tt::random_params(*head, kF64, rng);
  for (int32_t target : {11, -2}) {
    e = tt::error_of([&] {
      tt::Run run(*head, {tt::random_tensor({1, 3, 12}, kF64, rng), Tensor::ints({1, 3}, {target, -1, 0})},
                  ph, kF64);
      run.forward();
    });
    BOOST_TEST((tt::mentions(e, "target " + std::to_string(target)) && tt::mentions(e, "vocab_size 11")), e);
  }
  std::vector<Tensor> mismatched = {Tensor({1, 3, 12}, kF64), Tensor({1, 4}, plx_dtype_i32())};
  e = tt::error_of([&] { (void)head->output_desc(tt::descs(mismatched)); });
  BOOST_TEST((tt::mentions(e, "targets") && tt::mentions(e, "[1, 3]") && tt::mentions(e, "[1, 4]")), e);
}

BOOST_AUTO_TEST_SUITE_END()

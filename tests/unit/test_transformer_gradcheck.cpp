// Gradient checks of every transformer layer (the real built plugin), in float64: the analytic
// gradients from backward against central finite differences of the forward, for every element
// of every float input and every parameter.
//
// The checked function is a random linear functional of the output, L = sum(r * output) with
// r ~ N(0, 1) (for the LM head, L = s * loss with s = 0.7, passed as dL/dloss). Inputs and
// parameters are N(0, 1) * 0.5 (parameters) and N(0, 1) (inputs), not the host's initialization,
// so that norm weights, biases and attention scores are far from their trivial values.
//
// Tolerance: |analytic - numeric| <= 1e-6 * |numeric| + 1e-7 per element. With a step h = 1e-6,
// the central difference has a truncation error of about h^2 / 6 * |L'''| ~ 1e-12 and a rounding
// error of about (rounding of L) / h: L is a float64 sum of terms up to ~50 in magnitude, so it is
// rounded by a few 1e-15, i.e. ~1e-8 on the quotient (the largest seen in these cases: 1.8e-8).
// 1e-7 is five times that absolute floor; 1e-6 relative is far above both, while any real mistake
// (a missing term, a wrong index, a transposed weight, a factor) gives errors of 1e-2 or more of
// gradients that are O(0.1..20) here.
#define BOOST_TEST_MODULE transformer_gradcheck
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "test_transformer_support.hpp"

namespace {

using tt::Tensor;

constexpr double kStep = 1e-6;
constexpr double kRelTol = 1e-6;
constexpr double kAbsTol = 1e-7;
constexpr double kLossScale = 0.7;
constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 5;

const DLDataType kF64 = plx_dtype_f64();

bool is_head(const std::string& component) {
  return component == "transformer.lm_head";
}

// The inputs each component takes, random: token ids, hidden states, two hidden states (the MTP
// entry's rolled tokens' embedding and the depth before's hidden states), or hidden states and
// targets (with one ignored target).
std::vector<Tensor> make_inputs(const std::string& component, const tt::Model& m, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(m.vocab_size - 1));
  std::vector<int32_t> ids(static_cast<std::size_t>(kBatch * kSeq));
  for (int32_t& v : ids) v = id(rng);
  if (component == "transformer.embedding") return {Tensor::ints({kBatch, kSeq}, ids)};
  Tensor x = tt::random_tensor({kBatch, kSeq, m.hidden_size}, kF64, rng);
  if (component == "transformer.mtp_entry")
    return {x, tt::random_tensor({kBatch, kSeq, m.hidden_size}, kF64, rng)};
  if (!is_head(component)) return {x};
  ids[3] = -1;  // ignored: contributes neither to the loss nor to the count
  return {x, Tensor::ints({kBatch, kSeq}, ids)};
}

// The objective L for the current inputs and parameters of `run`.
double objective(tt::Run& run, const std::string& component, const Tensor& r) {
  std::vector<Tensor>& out = run.forward(true);
  if (is_head(component)) return kLossScale * out[0].get(0);
  double l = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(r.numel()); ++i) l += r.get(i) * out[0].get(i);
  return l;
}

struct Gradients {
  std::vector<Tensor> inputs;  // float inputs only are meaningful; others have null data
  std::vector<Tensor> params;
};

// grad_outputs for the objective: r for F layers; for the head [s] and an absent logits gradient.
std::vector<Tensor> grad_outputs_for(tt::Run& run, const std::string& component, const Tensor& r) {
  if (!is_head(component)) return {r};
  Tensor seed({1}, kF64);
  seed.set(0, kLossScale);
  Tensor logits = run.outputs.at(1);
  logits.null_data = true;  // "ignore it"
  return {seed, logits};
}

// Runs forward and backward; grad inputs start as garbage (they must be written, not added to),
// parameter gradients start at zero (they are accumulated).
Gradients analytic(tt::Run& run, const std::string& component, const Tensor& r) {
  run.forward(true);
  Gradients g;
  for (const Tensor& in : run.inputs) {
    Tensor t(in.shape, in.dtype);
    if (in.is_float())
      t.fill(123.0);
    else
      t.null_data = true;  // token ids and targets have no gradient
    g.inputs.push_back(t);
  }
  for (const Tensor& p : run.params) g.params.emplace_back(p.shape, p.dtype);
  std::vector<Tensor> go = grad_outputs_for(run, component, r);
  run.backward(go, g.inputs, g.params);
  return g;
}

// Central differences of `objective` over every element of `t` (which belongs to `run`).
std::vector<double> numeric(tt::Run& run, Tensor& t, const std::string& component, const Tensor& r) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double saved = t.get(i);
    t.set(i, saved + kStep);
    const double plus = objective(run, component, r);
    t.set(i, saved - kStep);
    const double minus = objective(run, component, r);
    t.set(i, saved);
    out[i] = (plus - minus) / (2 * kStep);
  }
  return out;
}

void compare(const std::string& what, const std::vector<double>& a, const std::vector<double>& n) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(a.size() == n.size());
    double worst = 0, largest = 0, worst_abs = 0;
    std::size_t failures = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double err = std::abs(a[i] - n[i]);
      largest = std::max(largest, std::abs(n[i]));
      worst_abs = std::max(worst_abs, err);
      worst = std::max(worst, err / (std::abs(n[i]) + kAbsTol / kRelTol));
      if (err > kRelTol * std::abs(n[i]) + kAbsTol) {
        if (++failures <= 5) BOOST_ERROR("element " << i << ": analytic " << a[i] << ", numeric " << n[i]);
      }
    }
    BOOST_TEST_MESSAGE(what << ": " << a.size() << " elements, largest |grad| " << largest << ", worst error "
                            << worst_abs << " (relative " << worst << ")");
    BOOST_TEST(failures == 0u);
    // A gradient that is zero everywhere would pass trivially: each one here is not.
    BOOST_TEST(largest > 1e-3);
  }
}

// transformer.attention's options for bidirectional attention.
const boost::json::object kNoMask{{"attn_mask_type", "no_mask"}};

// The component created as the engine creates it, with its own options (those of the model
// section's component entry, e.g. model.attention.options).
tt::ComponentLayer make_layer(const std::string& component, const tt::Model& m,
                              const boost::json::object& options) {
  return tt::ComponentLayer(tt::component(component), options, "model.layer.options", m.json(),
                            static_cast<uint32_t>(m.num_layers), DLDevice{kDLCPU, 0});
}

void gradcheck(const std::string& component, const tt::Model& m, uint64_t seed,
               const boost::json::object& options = {}) {
  const tt::ComponentLayer layer = make_layer(component, m, options);
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs = make_inputs(component, m, rng);
  std::vector<Tensor> params = tt::random_params(*layer, kF64, rng);
  tt::Run run(*layer, inputs, params, kF64);
  run.forward(true);
  const Tensor r = tt::random_tensor(run.outputs[0].shape, kF64, rng);

  const Gradients g = analytic(run, component, r);
  for (std::size_t i = 0; i < run.inputs.size(); ++i) {
    if (!run.inputs[i].is_float()) continue;
    compare("input " + std::to_string(i), g.inputs[i].values(), numeric(run, run.inputs[i], component, r));
  }
  for (std::size_t p = 0; p < run.params.size(); ++p)
    compare(std::string("parameter ") + layer->param(static_cast<uint32_t>(p)).name, g.params[p].values(),
            numeric(run, run.params[p], component, r));
}

// Backward twice on one forward: parameter gradients double (accumulated), input gradients stay
// the same (written).
void accumulates(const std::string& component, const tt::Model& m, uint64_t seed,
                 const boost::json::object& options = {}) {
  const tt::ComponentLayer layer = make_layer(component, m, options);
  std::mt19937_64 rng(seed);
  tt::Run run(*layer, make_inputs(component, m, rng), tt::random_params(*layer, kF64, rng), kF64);
  run.forward(true);
  const Tensor r = tt::random_tensor(run.outputs[0].shape, kF64, rng);
  Gradients g = analytic(run, component, r);
  const Gradients once = g;
  std::vector<Tensor> go = grad_outputs_for(run, component, r);
  run.backward(go, g.inputs, g.params);
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    BOOST_TEST_CONTEXT("parameter " << layer->param(static_cast<uint32_t>(p)).name) {
      double largest = 0;
      for (std::size_t i = 0; i < static_cast<std::size_t>(g.params[p].numel()); ++i) {
        largest = std::max(largest, std::abs(once.params[p].get(i)));
        // 1e-12: the second product may round differently (beta = 1), nothing more.
        BOOST_TEST(g.params[p].get(i) == 2 * once.params[p].get(i), boost::test_tools::tolerance(1e-12));
      }
      BOOST_TEST(largest > 1e-3);
    }
  }
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    if (!g.inputs[i].is_float()) continue;
    for (std::size_t k = 0; k < static_cast<std::size_t>(g.inputs[i].numel()); ++k)
      BOOST_TEST(g.inputs[i].get(k) == once.inputs[i].get(k), boost::test_tools::tolerance(1e-12));
  }
}

tt::Model model(const std::string& norm, const std::string& activation, int64_t groups) {
  tt::Model m;  // B = 2, S = 5, C = 12, nh = 3 (hd = 4), F = 10, V = 11
  m.normalization = norm;
  m.activation = activation;
  m.num_query_groups = groups;
  return m;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gradients)

BOOST_AUTO_TEST_CASE(embedding) {
  gradcheck("transformer.embedding", model("RMSNorm", "gelu", 3), 1);
}
// Learned absolute positions (embedding.position_embeddings.weight) added to the tokens' rows.
BOOST_AUTO_TEST_CASE(embedding_learned_absolute_positions) {
  tt::Model m = model("RMSNorm", "gelu", 3);
  m.position_embedding_type = "learned_absolute";
  gradcheck("transformer.embedding", m, 11);
}
// Attention without rotary embeddings (Megatron's position_embedding_type "none").
BOOST_AUTO_TEST_CASE(attention_without_position_embedding) {
  tt::Model m = model("LayerNorm", "gelu", 1);
  m.position_embedding_type = "none";
  gradcheck("transformer.attention", m, 12);
}

BOOST_AUTO_TEST_CASE(attention_rmsnorm_mha) {
  gradcheck("transformer.attention", model("RMSNorm", "gelu", 3), 2);
}
BOOST_AUTO_TEST_CASE(attention_rmsnorm_gqa) {
  gradcheck("transformer.attention", model("RMSNorm", "gelu", 1), 3);
}
BOOST_AUTO_TEST_CASE(attention_layernorm_mha) {
  gradcheck("transformer.attention", model("LayerNorm", "gelu", 3), 4);
}
BOOST_AUTO_TEST_CASE(attention_layernorm_gqa) {
  gradcheck("transformer.attention", model("LayerNorm", "gelu", 1), 5);
}
// Several groups of several heads: C = 16, nh = 4 (hd = 4), ng = 2.
BOOST_AUTO_TEST_CASE(attention_two_groups_of_two) {
  tt::Model m = model("RMSNorm", "gelu", 2);
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  gradcheck("transformer.attention", m, 6);
}

// Bidirectional attention (option attn_mask_type "no_mask", Megatron's AttnMaskType.no_mask, as in
// its CLIP ViT): every token sees the whole sequence. MHA and GQA, with and without RoPE.
BOOST_AUTO_TEST_CASE(attention_no_mask_rmsnorm_mha) {
  gradcheck("transformer.attention", model("RMSNorm", "gelu", 3), 41, kNoMask);
}
BOOST_AUTO_TEST_CASE(attention_no_mask_layernorm_gqa_without_position_embedding) {
  tt::Model m = model("LayerNorm", "gelu", 1);
  m.position_embedding_type = "none";  // a ViT's positions come with its patch embedding
  gradcheck("transformer.attention", m, 42, kNoMask);
}
BOOST_AUTO_TEST_CASE(attention_no_mask_two_groups_of_two) {
  tt::Model m = model("RMSNorm", "gelu", 2);
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  gradcheck("transformer.attention", m, 43, kNoMask);
}
// The gradient checks above would pass for a layer that ignored the option (a causal layer's
// gradients are right for its own forward), so: the option changes the function. On the same
// inputs and parameters the first token's output differs from the causal layer's (there it sees
// only itself), and the last token's, which sees every token either way, is the same (float64,
// the same products in another grouping: 1e-12 of the largest output covers the rounding).
// "causal", written out, is the default.
BOOST_AUTO_TEST_CASE(attention_no_mask_sees_the_tokens_after) {
  const tt::Model m = model("RMSNorm", "gelu", 1);
  const tt::ComponentLayer causal = make_layer("transformer.attention", m, {});
  const tt::ComponentLayer causal_named =
      make_layer("transformer.attention", m, {{"attn_mask_type", "causal"}});
  const tt::ComponentLayer no_mask = make_layer("transformer.attention", m, kNoMask);
  std::mt19937_64 rng(44);
  const std::vector<Tensor> inputs = make_inputs("transformer.attention", m, rng);
  const std::vector<Tensor> params = tt::random_params(*causal, kF64, rng);
  tt::Run a(*causal, inputs, params, kF64), b(*causal_named, inputs, params, kF64),
      c(*no_mask, inputs, params, kF64);
  const std::vector<double> ya = a.forward(false)[0].values(), yb = b.forward(false)[0].values(),
                            yc = c.forward(false)[0].values();
  BOOST_TEST(ya == yb, boost::test_tools::per_element());
  const auto c_dim = static_cast<std::size_t>(m.hidden_size);
  double largest = 0, first = 0, last = 0;
  for (std::size_t b_i = 0; b_i < static_cast<std::size_t>(kBatch); ++b_i)
    for (std::size_t i = 0; i < c_dim; ++i) {
      const std::size_t row0 = b_i * kSeq * c_dim, rowl = (b_i * kSeq + kSeq - 1) * c_dim;
      first = std::max(first, std::abs(ya[row0 + i] - yc[row0 + i]));
      last = std::max(last, std::abs(ya[rowl + i] - yc[rowl + i]));
    }
  for (double v : ya) largest = std::max(largest, std::abs(v));
  BOOST_TEST(last <= 1e-12 * largest, "the last token: " << last << " of " << largest);
  BOOST_TEST(first > 1e-2 * largest, "the first token: " << first << " of " << largest);
}

BOOST_AUTO_TEST_CASE(mlp_gelu_rmsnorm) {
  gradcheck("transformer.mlp", model("RMSNorm", "gelu", 3), 7);
}
BOOST_AUTO_TEST_CASE(mlp_swiglu_rmsnorm) {
  gradcheck("transformer.mlp", model("RMSNorm", "swiglu", 3), 8);
}
BOOST_AUTO_TEST_CASE(mlp_gelu_layernorm) {
  gradcheck("transformer.mlp", model("LayerNorm", "gelu", 3), 9);
}
BOOST_AUTO_TEST_CASE(mlp_swiglu_layernorm) {
  gradcheck("transformer.mlp", model("LayerNorm", "swiglu", 3), 10);
}

BOOST_AUTO_TEST_CASE(norm_rmsnorm) {
  gradcheck("transformer.norm", model("RMSNorm", "gelu", 3), 11);
}
BOOST_AUTO_TEST_CASE(norm_layernorm) {
  gradcheck("transformer.norm", model("LayerNorm", "gelu", 3), 12);
}

BOOST_AUTO_TEST_CASE(lm_head_tied) {
  gradcheck("transformer.lm_head", model("RMSNorm", "gelu", 3), 13);
}
BOOST_AUTO_TEST_CASE(lm_head_untied) {
  tt::Model m = model("RMSNorm", "gelu", 3);
  m.untie_embeddings_and_output_weights = true;
  gradcheck("transformer.lm_head", m, 14);
}

// The multi-token-prediction entry: both inputs through their own norm, eh_proj over the two.
BOOST_AUTO_TEST_CASE(mtp_entry_rmsnorm) {
  gradcheck("transformer.mtp_entry", model("RMSNorm", "gelu", 3), 15);
}
BOOST_AUTO_TEST_CASE(mtp_entry_layernorm) {
  gradcheck("transformer.mtp_entry", model("LayerNorm", "gelu", 3), 16);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(accumulation)

BOOST_AUTO_TEST_CASE(param_grads_accumulate_and_input_grads_are_written) {
  accumulates("transformer.embedding", model("RMSNorm", "gelu", 3), 21);
  accumulates("transformer.attention", model("LayerNorm", "gelu", 1), 22);
  accumulates("transformer.attention", model("RMSNorm", "gelu", 1), 27, kNoMask);
  accumulates("transformer.mlp", model("LayerNorm", "swiglu", 3), 23);
  accumulates("transformer.norm", model("LayerNorm", "gelu", 3), 24);
  accumulates("transformer.lm_head", model("RMSNorm", "gelu", 3), 25);
  accumulates("transformer.mtp_entry", model("LayerNorm", "gelu", 3), 26);
}

BOOST_AUTO_TEST_SUITE_END()

// One whole multi-token-prediction depth of the GPT in float64, as the engine chains it: the
// entry z = eh_proj([enorm(e); hnorm(h)]), its transformer layer on a residual stream of its own
// (z1 = z + attention(z), z2 = z1 + mlp(z1)), the depth's final norm and the output layer's loss
// against the rolled targets, L = s * loss. Every gradient (of e, h and every parameter of every
// layer) from the chained backward calls against central differences of L; same tolerances.
BOOST_AUTO_TEST_SUITE(mtp_block)

namespace {

struct Block {
  tt::Model m;
  tt::Layer entry, attention, mlp, norm, head;
  std::vector<tt::Run*> runs;  // in forward order
  tt::Run entry_run, attention_run, mlp_run, norm_run, head_run;

  static tt::Model model() {
    tt::Model m = ::model("LayerNorm", "swiglu", 1);
    m.untie_embeddings_and_output_weights = true;  // the head's weight is its own parameter here
    return m;
  }
  Block(std::mt19937_64& rng)
      : m(model()),
        entry("transformer.mtp_entry", m),
        attention("transformer.attention", m),
        mlp("transformer.mlp", m),
        norm("transformer.norm", m),
        head("transformer.lm_head", m),
        entry_run(*entry, make_inputs("transformer.mtp_entry", m, rng), tt::random_params(*entry, kF64, rng),
                  kF64),
        attention_run(*attention, {}, tt::random_params(*attention, kF64, rng), kF64),
        mlp_run(*mlp, {}, tt::random_params(*mlp, kF64, rng), kF64),
        norm_run(*norm, {}, tt::random_params(*norm, kF64, rng), kF64),
        head_run(*head, make_inputs("transformer.lm_head", m, rng), tt::random_params(*head, kF64, rng),
                 kF64) {
    runs = {&entry_run, &attention_run, &mlp_run, &norm_run, &head_run};
  }

  static Tensor sum(const Tensor& a, const Tensor& b) {
    Tensor out(a.shape, kF64);
    for (std::size_t i = 0; i < static_cast<std::size_t>(a.numel()); ++i) out.set(i, a.get(i) + b.get(i));
    return out;
  }

  // L = s * loss for the current inputs and parameters.
  double objective() {
    const Tensor z = entry_run.forward(true).at(0);
    attention_run.inputs = {z};
    const Tensor z1 = sum(z, attention_run.forward(true).at(0));
    mlp_run.inputs = {z1};
    const Tensor z2 = sum(z1, mlp_run.forward(true).at(0));
    norm_run.inputs = {z2};
    head_run.inputs.at(0) = norm_run.forward(true).at(0);
    return kLossScale * head_run.forward(true).at(0).get(0);
  }

  static std::vector<Tensor> zeros_like(const std::vector<Tensor>& ts) {
    std::vector<Tensor> out;
    for (const Tensor& t : ts) out.emplace_back(t.shape, t.dtype);
    return out;
  }

  // The chained backward after objective(): the gradients of e and h, and of every layer's
  // parameters (in `param_grads`, per run).
  std::vector<Tensor> backward(std::vector<std::vector<Tensor>>& param_grads) {
    for (tt::Run* run : runs) param_grads.push_back(zeros_like(run->params));
    const auto hidden = [&] { return Tensor(entry_run.inputs[0].shape, kF64); };
    // The head: dL/dloss = s, no logits gradient, the targets have none.
    Tensor seed({1}, kF64);
    seed.set(0, kLossScale);
    Tensor logits = head_run.outputs.at(1), targets = head_run.inputs.at(1);
    logits.null_data = targets.null_data = true;
    std::vector<Tensor> go = {seed, logits}, gi = {hidden(), targets};
    head_run.backward(go, gi, param_grads[4]);
    go = {gi[0]};
    gi = {hidden()};
    norm_run.backward(go, gi, param_grads[3]);
    const Tensor dz2 = gi[0];
    go = {dz2};
    gi = {hidden()};
    mlp_run.backward(go, gi, param_grads[2]);
    const Tensor dz1 = sum(dz2, gi[0]);
    go = {dz1};
    gi = {hidden()};
    attention_run.backward(go, gi, param_grads[1]);
    const Tensor dz = sum(dz1, gi[0]);
    go = {dz};
    gi = {hidden(), hidden()};
    entry_run.backward(go, gi, param_grads[0]);
    return gi;
  }

  std::vector<double> numeric(Tensor& t) {
    std::vector<double> out(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double saved = t.get(i);
      t.set(i, saved + kStep);
      const double plus = objective();
      t.set(i, saved - kStep);
      const double minus = objective();
      t.set(i, saved);
      out[i] = (plus - minus) / (2 * kStep);
    }
    return out;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(one_depth_chained_as_the_engine_does) {
  std::mt19937_64 rng(31);
  Block block(rng);
  block.head_run.inputs.at(1).i32[3] = -1;  // a rolled-out target: ignored
  block.objective();
  std::vector<std::vector<Tensor>> param_grads;
  const std::vector<Tensor> input_grads = block.backward(param_grads);
  compare("e (the rolled tokens' embedding)", input_grads[0].values(),
          block.numeric(block.entry_run.inputs[0]));
  compare("h (the depth before's hidden states)", input_grads[1].values(),
          block.numeric(block.entry_run.inputs[1]));
  const std::vector<const tt::Layer*> layers = {&block.entry, &block.attention, &block.mlp, &block.norm,
                                                &block.head};
  for (std::size_t r = 0; r < block.runs.size(); ++r)
    for (std::size_t p = 0; p < block.runs[r]->params.size(); ++p)
      compare(std::string((*layers[r])->param(static_cast<uint32_t>(p)).name), param_grads[r][p].values(),
              block.numeric(block.runs[r]->params[p]));
}

BOOST_AUTO_TEST_SUITE_END()

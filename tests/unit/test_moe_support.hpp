// Shared by the tests of the moe plugin (tests/unit/test_moe_*.cpp,
// tests/integration/test_moe_parity.cpp): loads the real built plugin, builds the model section
// and the component's options, creates moe.layer, runs its three stages forward and backward,
// and collects the values the layer reports (aux and z-loss, tokens per expert). Host tensors are
// the transformer tests' (tt::Tensor).
#pragma once

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_transformer_support.hpp"

namespace moe_test {

namespace fs = std::filesystem;
using tt::Tensor;

// The values the layer reported through the host's report_metric, by name (the latest of each).
inline std::map<std::string, double>& reported() {
  static std::map<std::string, double> values;
  return values;
}

// One host for the whole test program with the moe plugin loaded; unloaded at exit.
inline plexus::PluginHost& host() {
  static plexus::PluginHost instance;
  static const bool loaded = [] {
    tt::load_built_plugin(instance, "moe");
    instance.services().set_metric_sink(
        [](const std::string&, const std::string& name, double value) { reported()[name] = value; });
    return true;
  }();
  (void)loaded;
  return instance;
}

// The model section's keys the layer reads, and its own options (only those set are written, so
// the layer's defaults apply to the rest).
struct Config {
  int64_t hidden = 8;
  int64_t ffn = 6;
  std::string normalization = "RMSNorm";
  std::string activation = "gelu";
  double layernorm_epsilon = 1e-5;
  double init_method_std = 0.02;
  uint32_t num_layers = 2;
  boost::json::object options{{"num_moe_experts", 4}, {"moe_router_topk", 2}};

  int64_t experts() const { return options.at("num_moe_experts").as_int64(); }
  int64_t topk() const { return options.at("moe_router_topk").as_int64(); }
  bool pre_softmax() const {
    const auto* v = options.if_contains("moe_router_pre_softmax");
    return v != nullptr && v->as_bool();
  }
  std::string score() const {
    const auto* v = options.if_contains("moe_router_score_function");
    return v != nullptr ? std::string(v->as_string()) : "softmax";
  }
  double coeff(const char* key) const {
    const auto* v = options.if_contains(key);
    return v != nullptr ? v->to_number<double>() : 0.0;
  }

  boost::json::object model() const {
    boost::json::object m;
    m["hidden_size"] = hidden;
    m["ffn_hidden_size"] = ffn;
    m["normalization"] = normalization;
    m["activation"] = activation;
    m["layernorm_epsilon"] = layernorm_epsilon;
    m["init_method_std"] = init_method_std;
    return m;
  }
};

// moe.layer with the config nodes it was created from.
struct Layer : tt::ComponentLayer {
  explicit Layer(const Config& c, DLDevice device = DLDevice{kDLCPU, 0})
      : ComponentLayer(host().get(PLX_KIND_LAYER, "moe.layer"), c.options, "model.moe.options", c.model(), c.num_layers,
                       device) {}
};

using tt::param_index;

// Parameters away from their initial constants, so every gradient path counts: norm weights
// 1 + N(0, 0.2), the LayerNorm bias N(0, 0.2), the router N(0, 1 / C) scaled so the logits are
// O(1) and spread, the experts N(0, 1 / fan_in).
inline std::vector<Tensor> random_params(const plexus::LayerInstance& layer, const Config& c, DLDataType dtype,
                                         std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<Tensor> out;
  for (uint32_t i = 0; i < layer.info().num_params; ++i) {
    const plx_param_spec spec = layer.param(i);
    const std::string name = spec.name;
    Tensor t(std::vector<int64_t>(spec.desc.dims, spec.desc.dims + spec.desc.ndim), dtype);
    const double fan_in = static_cast<double>(spec.desc.dims[spec.desc.ndim - 1]);
    for (std::size_t k = 0; k < static_cast<std::size_t>(t.numel()); ++k) {
      double v = 0;
      if (name == "pre_mlp_layernorm.weight")
        v = 1 + 0.2 * normal(rng);
      else if (name == "pre_mlp_layernorm.bias")
        v = 0.2 * normal(rng);
      else if (name == "mlp.router.weight")
        v = normal(rng) * 1.5 / std::sqrt(static_cast<double>(c.hidden));
      else
        v = normal(rng) / std::sqrt(fan_in);
      t.set(k, v);
    }
    out.push_back(std::move(t));
  }
  return out;
}

// One run of the layer over owned host tensors, every stage (the transformer tests' tt::Run).
using Run = tt::Run;

// The router's logits recomputed from the layer's contract in float64 (pre-norm, then u Wr^T),
// [T, E], to check how far every token's k-th logit is from its (k+1)-th.
inline std::vector<double> logits(const Config& c, const plexus::LayerInstance& layer, const Tensor& h,
                                  const std::vector<Tensor>& params) {
  const Tensor& w = params[param_index(layer, "pre_mlp_layernorm.weight")];
  const Tensor& router = params[param_index(layer, "mlp.router.weight")];
  const bool rms = c.normalization == "RMSNorm";
  const Tensor* bias = rms ? nullptr : &params[param_index(layer, "pre_mlp_layernorm.bias")];
  const int64_t tokens = h.shape[0] * h.shape[1], d = c.hidden, e = c.experts();
  std::vector<double> out(static_cast<std::size_t>(tokens * e));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> x(static_cast<std::size_t>(d));
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < d; ++i) mean += x[static_cast<std::size_t>(i)] = h.get(static_cast<std::size_t>(t * d + i));
    mean /= static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i) {
      const double v = x[static_cast<std::size_t>(i)] - (rms ? 0 : mean);
      sq += v * v;
    }
    const double scale = 1 / std::sqrt(sq / static_cast<double>(d) + c.layernorm_epsilon);
    for (int64_t j = 0; j < e; ++j) {
      double z = 0;
      for (int64_t i = 0; i < d; ++i) {
        const auto ii = static_cast<std::size_t>(i);
        const double u = (x[ii] - (rms ? 0 : mean)) * scale * w.get(ii) + (rms ? 0 : bias->get(ii));
        z += u * router.get(static_cast<std::size_t>(j * d + i));
      }
      out[static_cast<std::size_t>(t * e + j)] = z;
    }
  }
  return out;
}

// The smallest gap, over the tokens, between the k-th and the (k+1)-th largest logit: the
// perturbation a finite difference may make before the routing changes.
inline double routing_margin(const std::vector<double>& z, int64_t experts, int64_t k) {
  if (k >= experts) return 1e300;
  double margin = 1e300;
  for (std::size_t t = 0; t < z.size() / static_cast<std::size_t>(experts); ++t) {
    std::vector<double> row(z.begin() + static_cast<std::ptrdiff_t>(t) * experts,
                            z.begin() + static_cast<std::ptrdiff_t>(t + 1) * experts);
    std::sort(row.begin(), row.end(), std::greater<>());
    margin = std::min(margin, row[static_cast<std::size_t>(k - 1)] - row[static_cast<std::size_t>(k)]);
  }
  return margin;
}

inline int64_t option(const Config& c, const char* key) {
  const auto* v = c.options.if_contains(key);
  return v != nullptr ? v->as_int64() : 0;
}

// Group-limited routing by the layer's contract, for one token's logits: the experts of the
// group_topk groups whose topk / group_topk largest selection scores sum highest, largest logit
// first. `margin` becomes the smaller of the gap between the last chosen and the first other
// group's score and the gap at the k-th choice among the allowed experts.
inline std::vector<int> group_choice(const Config& c, const double* z, double& margin) {
  const int64_t e = c.experts(), groups = option(c, "moe_router_num_groups"), g = option(c, "moe_router_group_topk");
  const int64_t per = e / groups, summed = c.topk() / g;
  double all = 0;
  for (int64_t i = 0; i < e; ++i) all += std::exp(z[i]);
  std::vector<double> score(static_cast<std::size_t>(e));
  for (int64_t i = 0; i < e; ++i)
    score[static_cast<std::size_t>(i)] = c.score() == "sigmoid" ? 1 / (1 + std::exp(-z[i]))
                                         : c.pre_softmax()      ? std::exp(z[i]) / all
                                                                : z[i];
  std::vector<std::pair<double, int>> group_scores;
  for (int64_t q = 0; q < groups; ++q) {
    std::vector<double> mine(score.begin() + q * per, score.begin() + (q + 1) * per);
    std::sort(mine.begin(), mine.end(), std::greater<>());
    double sum = 0;
    for (int64_t j = 0; j < summed; ++j) sum += mine[static_cast<std::size_t>(j)];
    group_scores.emplace_back(-sum, static_cast<int>(q));
  }
  std::sort(group_scores.begin(), group_scores.end());
  if (g < groups)
    margin = std::min(margin, group_scores[static_cast<std::size_t>(g)].first - group_scores[static_cast<std::size_t>(g - 1)].first);
  std::vector<int> allowed;
  for (int64_t q = 0; q < g; ++q)
    for (int64_t i = 0; i < per; ++i) allowed.push_back(group_scores[static_cast<std::size_t>(q)].second * static_cast<int>(per) + static_cast<int>(i));
  std::stable_sort(allowed.begin(), allowed.end(), [&](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  if (static_cast<int64_t>(allowed.size()) > c.topk())
    margin = std::min(margin, z[allowed[static_cast<std::size_t>(c.topk() - 1)]] - z[allowed[static_cast<std::size_t>(c.topk())]]);
  allowed.resize(static_cast<std::size_t>(c.topk()));
  return allowed;
}

// The smallest margin of the group choice over the tokens (1e300 without groups).
inline double group_margin(const Config& c, const std::vector<double>& z) {
  double margin = 1e300;
  if (option(c, "moe_router_num_groups") == 0) return margin;
  for (std::size_t t = 0; t < z.size() / static_cast<std::size_t>(c.experts()); ++t)
    group_choice(c, z.data() + t * static_cast<std::size_t>(c.experts()), margin);
  return margin;
}

// The routing probabilities [T, k] (choices largest logit first) from the logits, by the
// layer's contract; and the chosen experts.
inline std::vector<double> probabilities(const Config& c, const std::vector<double>& z, std::vector<int>& chosen) {
  const int64_t e = c.experts(), k = c.topk();
  const std::size_t tokens = z.size() / static_cast<std::size_t>(e);
  std::vector<double> p;
  chosen.clear();
  for (std::size_t t = 0; t < tokens; ++t) {
    const double* row = z.data() + t * static_cast<std::size_t>(e);
    std::vector<int> order(static_cast<std::size_t>(e));
    for (int i = 0; i < e; ++i) order[static_cast<std::size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    order.resize(static_cast<std::size_t>(k));
    if (option(c, "moe_router_num_groups") > 0) {
      double unused = 1e300;
      order = group_choice(c, row, unused);
    }
    double all = 0, sel = 0;
    std::vector<double> v;
    for (int i = 0; i < e; ++i) all += c.score() == "softmax" ? std::exp(row[i]) : 1 / (1 + std::exp(-row[i]));
    for (int i : order) {
      const double s = c.score() == "softmax" ? std::exp(row[i]) : 1 / (1 + std::exp(-row[i]));
      v.push_back(s);
      sel += s;
    }
    for (double& s : v) {
      if (c.score() == "softmax")
        s /= c.pre_softmax() ? all : sel;
      else if (k > 1)
        s /= sel;
    }
    p.insert(p.end(), v.begin(), v.end());
    chosen.insert(chosen.end(), order.begin(), order.end());
  }
  return p;
}

// Under the "probs" drop policy: the smallest gap, over the experts routed more pairs than their
// capacity, between the last kept and the first dropped probability (1e300 when none drops).
inline double capacity_margin(const Config& c, const std::vector<double>& z) {
  const auto* factor = c.options.if_contains("moe_expert_capacity_factor");
  if (factor == nullptr) return 1e300;
  const auto* policy = c.options.if_contains("moe_token_drop_policy");
  if (policy != nullptr && policy->as_string() == "position") return 1e300;
  std::vector<int> chosen;
  const std::vector<double> p = probabilities(c, z, chosen);
  const double tokens = static_cast<double>(z.size()) / static_cast<double>(c.experts());
  const auto capacity = static_cast<std::size_t>(
      std::ceil(tokens * static_cast<double>(c.topk()) / static_cast<double>(c.experts()) * factor->to_number<double>()));
  double margin = 1e300;
  for (int e = 0; e < c.experts(); ++e) {
    std::vector<double> mine;
    for (std::size_t i = 0; i < chosen.size(); ++i)
      if (chosen[i] == e) mine.push_back(p[i]);
    if (mine.size() <= capacity) continue;
    std::sort(mine.begin(), mine.end(), std::greater<>());
    margin = std::min(margin, mine[capacity - 1] - mine[capacity]);
  }
  return margin;
}

}  // namespace moe_test

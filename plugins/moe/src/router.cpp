#include "router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "plexus_kernels/gemm.hpp"

namespace plexus::moe {
namespace {

namespace k = plexus::kernels;

// Megatron's guard against a zero sum of sigmoid scores.
constexpr double kSigmoidSumEps = 1e-20;

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Group-limited routing: the experts of the token's group_topk best groups, largest logit first
// (ties to the lower index). A group's score is the sum of its topk / group_topk largest
// selection scores: the logits for softmax after the top-k, else the softmax or sigmoid scores.
template <class T>
std::vector<int32_t> group_candidates(const MoeConfig& c, const T* z, const T* bias) {
  const int64_t e_count = c.experts, per_group = c.experts / c.groups, summed = c.topk / c.group_topk;
  std::vector<double> score(static_cast<std::size_t>(e_count));
  double zmax = static_cast<double>(z[0]);
  for (int64_t i = 1; i < e_count; ++i) zmax = std::max(zmax, static_cast<double>(z[i]));
  double denom = 0;
  for (int64_t i = 0; i < e_count; ++i) denom += std::exp(static_cast<double>(z[i]) - zmax);
  for (int64_t i = 0; i < e_count; ++i) {
    const double v = static_cast<double>(z[i]);
    if (c.score == ScoreFunction::sigmoid)
      score[static_cast<std::size_t>(i)] = 1 / (1 + std::exp(-v));
    else if (c.pre_softmax)
      score[static_cast<std::size_t>(i)] = std::exp(v - zmax) / denom;
    else
      score[static_cast<std::size_t>(i)] = v;
    if (bias != nullptr) score[static_cast<std::size_t>(i)] += static_cast<double>(bias[i]);
  }
  std::vector<double> group_score(static_cast<std::size_t>(c.groups));
  for (int64_t g = 0; g < c.groups; ++g) {
    std::vector<double> mine(score.begin() + g * per_group, score.begin() + (g + 1) * per_group);
    std::sort(mine.begin(), mine.end(), std::greater<>());
    for (int64_t j = 0; j < summed; ++j)
      group_score[static_cast<std::size_t>(g)] += mine[static_cast<std::size_t>(j)];
  }
  std::vector<int32_t> groups(static_cast<std::size_t>(c.groups));
  std::iota(groups.begin(), groups.end(), 0);
  std::stable_sort(groups.begin(), groups.end(), [&](int32_t a, int32_t b) {
    return group_score[static_cast<std::size_t>(a)] > group_score[static_cast<std::size_t>(b)];
  });
  std::vector<int32_t> allowed;
  for (int64_t g = 0; g < c.group_topk; ++g)
    for (int64_t i = 0; i < per_group; ++i)
      allowed.push_back(static_cast<int32_t>(groups[static_cast<std::size_t>(g)] * per_group + i));
  if (bias != nullptr) {  // by the biased selection score
    std::sort(allowed.begin(), allowed.end(), [&](int32_t a, int32_t b) {
      const double sa = score[static_cast<std::size_t>(a)], sb = score[static_cast<std::size_t>(b)];
      return sa > sb || (sa == sb && a < b);
    });
    return allowed;
  }
  std::sort(allowed.begin(), allowed.end(),
            [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  return allowed;
}

// The expert bias's selection scores of one token: the score the top-k is taken over (the logit
// for softmax after the top-k, the softmax over all experts before it, the sigmoid) plus the bias.
template <class T>
std::vector<double> selection_scores(const MoeConfig& c, const T* z, const T* bias) {
  const int64_t e_count = c.experts;
  std::vector<double> out(static_cast<std::size_t>(e_count));
  double zmax = static_cast<double>(z[0]), denom = 0;
  for (int64_t i = 1; i < e_count; ++i) zmax = std::max(zmax, static_cast<double>(z[i]));
  for (int64_t i = 0; i < e_count; ++i) denom += std::exp(static_cast<double>(z[i]) - zmax);
  for (int64_t i = 0; i < e_count; ++i) {
    const double v = static_cast<double>(z[i]);
    const double score = c.score == ScoreFunction::sigmoid ? 1 / (1 + std::exp(-v))
                         : c.pre_softmax                   ? std::exp(v - zmax) / denom
                                                           : v;
    out[static_cast<std::size_t>(i)] = score + static_cast<double>(bias[i]);
  }
  return out;
}

}  // namespace

template <class T>
void router_forward(const MoeConfig& c, int64_t tokens, const T* u, const T* w_router, const T* bias,
                    RouterSaved& s, const plexus::sdk::Group& sequence) {
  const int64_t e_count = c.experts, kk = c.topk;
  const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
  s.tokens = tokens;
  T* logits = s.logits.get<T>(sz(tokens * e_count));
  k::gemm_parallel<T>(k::Trans::N, k::Trans::T, tokens, e_count, c.hidden, T(1), u, c.hidden, w_router,
                      c.hidden, T(0), logits, e_count);
  T* scores = s.scores.get<T>(sz(tokens * e_count));
  T* probs = s.probs.get<T>(sz(tokens * kk));
  T* lse = s.lse.get<T>(sz(tokens));
  s.chosen.assign(sz(tokens * kk), 0);
  s.counts.assign(sz(e_count), 0);
  s.aux_counts.assign(sz(e_count), 0);
  std::vector<int32_t> plain(sz(tokens * kk));  // the top-k without groups, for the aux counts

#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const T* z = logits + t * e_count;
    T* sc = scores + t * e_count;
    int32_t* pick = s.chosen.data() + t * kk;
    T* p = probs + t * kk;
    // The k largest logits, ties to the lower index, largest first.
    const auto larger = [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
    std::vector<int32_t> order(sz(e_count));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), larger);
    for (int64_t j = 0; j < kk; ++j) plain[sz(t * kk + j)] = order[sz(j)];
    if (c.groups > 0) {
      const std::vector<int32_t> allowed = group_candidates(c, z, bias);
      for (int64_t j = 0; j < kk; ++j) pick[j] = allowed[sz(j)];
    } else if (bias != nullptr) {
      const std::vector<double> biased = selection_scores(c, z, bias);
      std::vector<int32_t> by_bias(sz(e_count));
      std::iota(by_bias.begin(), by_bias.end(), 0);
      std::partial_sort(by_bias.begin(), by_bias.begin() + kk, by_bias.end(), [&](int32_t a, int32_t b) {
        return biased[sz(a)] > biased[sz(b)] || (biased[sz(a)] == biased[sz(b)] && a < b);
      });
      for (int64_t j = 0; j < kk; ++j) pick[j] = by_bias[sz(j)];
    } else {
      for (int64_t j = 0; j < kk; ++j) pick[j] = order[sz(j)];
    }
    // Softmax over all experts: the z-loss's logsumexp, and the scores of the softmax routers.
    const T zmax = z[order[0]];
    T sum = 0;
    for (int64_t i = 0; i < e_count; ++i) sum += std::exp(z[i] - zmax);
    lse[t] = zmax + std::log(sum);
    if (c.score == ScoreFunction::softmax) {
      for (int64_t i = 0; i < e_count; ++i) sc[i] = std::exp(z[i] - lse[t]);
      if (c.pre_softmax) {
        for (int64_t j = 0; j < kk; ++j) p[j] = sc[pick[j]];
      } else {
        T sel = 0;
        for (int64_t j = 0; j < kk; ++j) sel += std::exp(z[pick[j]] - zmax);
        for (int64_t j = 0; j < kk; ++j) p[j] = std::exp(z[pick[j]] - zmax) / sel;
      }
    } else {
      T all = 0;
      for (int64_t i = 0; i < e_count; ++i) all += sc[i] = sigmoid(z[i]);
      T sel = 0;
      for (int64_t j = 0; j < kk; ++j) sel += p[j] = sc[pick[j]];
      if (kk > 1)
        for (int64_t j = 0; j < kk; ++j) p[j] /= sel + T(kSigmoidSumEps);
      if (kk > 1)
        for (int64_t i = 0; i < e_count; ++i) sc[i] /= all + T(kSigmoidSumEps);
    }
    if (c.topk_scaling_factor != 1)
      for (int64_t j = 0; j < kk; ++j) p[j] *= static_cast<T>(c.topk_scaling_factor);
  }
  for (int64_t i = 0; i < tokens * kk; ++i) {
    ++s.counts[sz(s.chosen[sz(i)])];
    ++s.aux_counts[sz(plain[sz(i)])];
  }

  // Under sequence parallelism the aux loss's counts are the whole microbatch's.
  s.loss_tokens = tokens * sequence.size();
  if (sequence.size() > 1) {
    std::vector<double> counts(s.aux_counts.begin(), s.aux_counts.end());
    int64_t extent = e_count;
    DLTensor view{counts.data(), DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 64, 1}, &extent, nullptr, 0};
    sequence.all_reduce(view);
    for (int64_t i = 0; i < e_count; ++i) s.aux_counts[sz(i)] = static_cast<int64_t>(counts[sz(i)]);
  }
  // The losses in double, whatever T: they are reported values, not part of the output.
  const double n = static_cast<double>(s.loss_tokens);
  s.aux_loss = 0;
  if (c.aux_loss_coeff > 0) {
    for (int64_t i = 0; i < e_count; ++i) {
      double column = 0;
      for (int64_t t = 0; t < tokens; ++t) column += static_cast<double>(scores[t * e_count + i]);
      s.aux_loss += column * static_cast<double>(s.aux_counts[sz(i)]);
    }
    s.aux_loss *= static_cast<double>(e_count) * c.aux_loss_coeff / (static_cast<double>(kk) * n * n);
  }
  s.z_loss = 0;
  if (c.z_loss_coeff > 0) {
    for (int64_t t = 0; t < tokens; ++t)
      s.z_loss += static_cast<double>(lse[t]) * static_cast<double>(lse[t]);
    s.z_loss *= c.z_loss_coeff / n;
  }
}

template <class T>
void router_backward(const MoeConfig& c, const RouterSaved& s, const T* dprobs, double loss_scale,
                     T* dlogits) {
  const int64_t e_count = c.experts, kk = c.topk, tokens = s.tokens;
  const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
  const T* logits = s.logits.data<T>();
  const T* scores = s.scores.data<T>();
  const T* probs = s.probs.data<T>();
  const T* lse = s.lse.data<T>();
  const double n = static_cast<double>(s.loss_tokens);
  // d aux / d s_ti = E coeff / (k T^2) count_i, the same for every token.
  std::vector<T> aux_grad(sz(e_count), T(0));
  if (c.aux_loss_coeff > 0)
    for (int64_t i = 0; i < e_count; ++i)
      aux_grad[sz(i)] =
          static_cast<T>(loss_scale * static_cast<double>(e_count) * c.aux_loss_coeff /
                         (static_cast<double>(kk) * n * n) * static_cast<double>(s.aux_counts[sz(i)]));
  const T z_grad = static_cast<T>(loss_scale * 2 * c.z_loss_coeff / n);

#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const T* z = logits + t * e_count;
    const T* sc = scores + t * e_count;
    const int32_t* pick = s.chosen.data() + t * kk;
    // With moe_router_topk_scaling_factor f the kept probabilities are f p and dprobs is the
    // gradient of f p: the formulas below take p and its gradient f dprobs.
    const T f = static_cast<T>(c.topk_scaling_factor);
    const auto p = [&](int64_t j) { return probs[t * kk + j] / f; };
    const auto dp = [&](int64_t j) { return dprobs[t * kk + j] * f; };
    T* dz = dlogits + t * e_count;
    for (int64_t i = 0; i < e_count; ++i) dz[i] = 0;
    T pdp = 0;  // sum_j p_j dp_j
    for (int64_t j = 0; j < kk; ++j) pdp += p(j) * dp(j);
    if (c.score == ScoreFunction::softmax && !c.pre_softmax) {
      // p = softmax(z_S): dz_j = p_j (dp_j - sum p dp).
      for (int64_t j = 0; j < kk; ++j) dz[pick[j]] += p(j) * (dp(j) - pdp);
    } else if (c.score == ScoreFunction::softmax) {
      // p_j = s_{S_j}, s = softmax(z): dz = s (g - sum s g), g = dp scattered to S.
      for (int64_t i = 0; i < e_count; ++i) dz[i] -= sc[i] * pdp;
      for (int64_t j = 0; j < kk; ++j) dz[pick[j]] += p(j) * dp(j);
    } else {
      // sigmoid: p_j = sig_j / (sum_S sig + eps) for k > 1, else sig_j.
      T sel = 0;
      for (int64_t j = 0; j < kk; ++j) sel += sigmoid(z[pick[j]]);
      for (int64_t j = 0; j < kk; ++j) {
        const T sg = sigmoid(z[pick[j]]);
        const T dsg = kk > 1 ? (dp(j) - pdp) / (sel + T(kSigmoidSumEps)) : dp(j);
        dz[pick[j]] += dsg * sg * (T(1) - sg);
      }
    }
    if (c.aux_loss_coeff > 0) {
      T sg = 0;  // sum_i s_i g_i
      for (int64_t i = 0; i < e_count; ++i) sg += sc[i] * aux_grad[sz(i)];
      if (c.score == ScoreFunction::softmax) {
        for (int64_t i = 0; i < e_count; ++i) dz[i] += sc[i] * (aux_grad[sz(i)] - sg);
      } else if (kk == 1) {
        // s_i = sig_i (not normalized for k = 1).
        for (int64_t i = 0; i < e_count; ++i) {
          const T sig = sigmoid(z[i]);
          dz[i] += aux_grad[sz(i)] * sig * (T(1) - sig);
        }
      } else {
        // s_i = sig_i / D, D = sum_all sig + eps: dsig_m = (g_m - sum s g) / D.
        T all = 0;
        for (int64_t i = 0; i < e_count; ++i) all += sigmoid(z[i]);
        for (int64_t i = 0; i < e_count; ++i) {
          const T sig = sigmoid(z[i]);
          dz[i] += (aux_grad[sz(i)] - sg) / (all + T(kSigmoidSumEps)) * sig * (T(1) - sig);
        }
      }
    }
    if (c.z_loss_coeff > 0)
      for (int64_t i = 0; i < e_count; ++i) dz[i] += z_grad * lse[t] * std::exp(z[i] - lse[t]);
  }
}

template void router_forward<float>(const MoeConfig&, int64_t, const float*, const float*, const float*,
                                    RouterSaved&, const plexus::sdk::Group&);
template void router_forward<double>(const MoeConfig&, int64_t, const double*, const double*, const double*,
                                     RouterSaved&, const plexus::sdk::Group&);
template void router_backward<float>(const MoeConfig&, const RouterSaved&, const float*, double, float*);
template void router_backward<double>(const MoeConfig&, const RouterSaved&, const double*, double, double*);

}  // namespace plexus::moe

// The router's per-token work on the GPU, router.cpp step for step in float32 (the selection
// with the expert bias in double, as there): the top-k, the probabilities, the aux loss's scores
// and the logsumexp forward; the logits' gradient backward. One thread per token: E and k are
// small, and a token's loops then run in the CPU's order.
#include <cuda_runtime.h>

#include "cuda/device.cuh"
#include "cuda/kernels.hpp"

namespace plexus::moe::cuda {
namespace {

// Megatron's guard against a zero sum of sigmoid scores (router.cpp).
constexpr float kSigmoidSumEps = 1e-20f;

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Whether expert i is among the first n picks.
__device__ __forceinline__ bool taken(const int32_t* picks, int64_t n, int32_t i) {
  for (int64_t j = 0; j < n; ++j)
    if (picks[j] == i) return true;
  return false;
}

// The biased selection score of expert i (router.cpp's selection_scores).
__device__ __forceinline__ double biased_score(const RouteShape& s, const float* z, const float* bias,
                                               double zmax, double denom, int32_t i) {
  const double v = static_cast<double>(z[i]);
  const double score = s.sigmoid ? 1 / (1 + exp(-v)) : s.pre_softmax ? exp(v - zmax) / denom : v;
  return score + static_cast<double>(bias[i]);
}

// Whether (a, ia) comes before (b, ib) in the order "larger value first, ties to the lower index".
__device__ __forceinline__ bool before(double a, int64_t ia, double b, int64_t ib) {
  return a > b || (a == b && ia < ib);
}

// The index in [first, first + n) of values v (stride 1) that comes next in that order after
// (prev, prev_i) (prev_i < 0: the first), among those `allowed` says; -1 when none is left.
template <class Allowed>
__device__ int64_t next_in_order(const double* v, int64_t first, int64_t n, double prev, int64_t prev_i,
                                 Allowed allowed) {
  int64_t best = -1;
  for (int64_t i = first; i < first + n; ++i) {
    if (!allowed(i)) continue;
    if (prev_i >= 0 && !before(prev, prev_i, v[i], i)) continue;  // not after the previous one
    if (best < 0 || before(v[i], i, v[best], best)) best = i;
  }
  return best;
}

// Group-limited routing for one token (router.cpp's group_candidates): sel [E] the selection
// scores (plus the bias), each group scored by the sum of its `summed` largest (largest first),
// the g best groups (ties to the lower group), then the k largest by `order` [E] (the biased
// scores with a bias, else the logits) among their experts, ties to the lower expert.
__device__ void group_choice(const RouteShape& s, const double* sel, const double* order, double* group_score,
                             int32_t* pick) {
  const int64_t per_group = s.experts / s.groups, summed = s.topk / s.group_topk;
  const auto any = [](int64_t) { return true; };
  for (int64_t q = 0; q < s.groups; ++q) {
    double sum = 0, prev = 0;
    int64_t prev_i = -1;
    for (int64_t j = 0; j < summed; ++j) {
      prev_i = next_in_order(sel, q * per_group, per_group, prev, prev_i, any);
      prev = sel[prev_i];
      sum += prev;
    }
    group_score[q] = sum;
  }
  // Group q is among the g best when fewer than g groups come before it.
  const auto chosen_group = [&](int64_t q) {
    int64_t ahead = 0;
    for (int64_t r = 0; r < s.groups; ++r) ahead += before(group_score[r], r, group_score[q], q) ? 1 : 0;
    return ahead < s.group_topk;
  };
  const auto allowed = [&](int64_t i) { return chosen_group(i / per_group); };
  double prev = 0;
  int64_t prev_i = -1;
  for (int64_t j = 0; j < s.topk; ++j) {
    prev_i = next_in_order(order, 0, s.experts, prev, prev_i, allowed);
    prev = order[prev_i];
    pick[j] = static_cast<int32_t>(prev_i);
  }
}

__global__ void route_kernel(RouteShape s, const float* logits, const float* bias, int32_t* chosen,
                             int32_t* plain, float* scores, float* probs, float* lse, double* selection,
                             double* group_scores) {
  const int64_t e_count = s.experts, kk = s.topk;
  for (int64_t t = global_thread(); t < s.tokens; t += grid_threads()) {
    const float* z = logits + t * e_count;
    float* sc = scores + t * e_count;
    float* p = probs + t * kk;
    int32_t* top = plain + t * kk;
    int32_t* pick = chosen + t * kk;
    // The k largest logits, largest first; scanning upwards keeps the lower index on a tie.
    for (int64_t j = 0; j < kk; ++j) {
      int32_t best = -1;
      for (int32_t i = 0; i < e_count; ++i)
        if (!taken(top, j, i) && (best < 0 || z[i] > z[best])) best = i;
      top[j] = best;
    }
    if (s.groups > 0) {
      double* sel = selection + t * e_count;
      double zmax = static_cast<double>(z[0]), denom = 0;
      for (int64_t i = 1; i < e_count; ++i) zmax = fmax(zmax, static_cast<double>(z[i]));
      for (int64_t i = 0; i < e_count; ++i) denom += exp(static_cast<double>(z[i]) - zmax);
      for (int32_t i = 0; i < e_count; ++i) {
        const double v = static_cast<double>(z[i]);
        const double score = s.sigmoid ? 1 / (1 + exp(-v)) : s.pre_softmax ? exp(v - zmax) / denom : v;
        sel[i] = bias != nullptr ? score + static_cast<double>(bias[i]) : score;
      }
      // Among the allowed experts: by the biased score with a bias, else by the logit. The
      // logits go into the top-k's order as doubles (exact), scratch of the group scores' row
      // end: [T, G + E] holds both.
      double* by_logit = group_scores + t * (s.groups + e_count) + s.groups;
      for (int64_t i = 0; i < e_count; ++i) by_logit[i] = static_cast<double>(z[i]);
      group_choice(s, sel, bias != nullptr ? sel : by_logit, group_scores + t * (s.groups + e_count), pick);
    } else if (bias != nullptr) {
      double zmax = static_cast<double>(z[0]), denom = 0;
      for (int64_t i = 1; i < e_count; ++i) zmax = fmax(zmax, static_cast<double>(z[i]));
      for (int64_t i = 0; i < e_count; ++i) denom += exp(static_cast<double>(z[i]) - zmax);
      for (int64_t j = 0; j < kk; ++j) {
        int32_t best = -1;
        double best_score = 0;
        for (int32_t i = 0; i < e_count; ++i) {
          if (taken(pick, j, i)) continue;
          const double v = biased_score(s, z, bias, zmax, denom, i);
          if (best < 0 || v > best_score) {
            best = i;
            best_score = v;
          }
        }
        pick[j] = best;
      }
    } else {
      for (int64_t j = 0; j < kk; ++j) pick[j] = top[j];
    }
    // Softmax over all experts: the z-loss's logsumexp, and the scores of the softmax routers.
    const float zmax = z[top[0]];
    float sum = 0;
    for (int64_t i = 0; i < e_count; ++i) sum += expf(z[i] - zmax);
    const float l = zmax + logf(sum);
    lse[t] = l;
    if (!s.sigmoid) {
      for (int64_t i = 0; i < e_count; ++i) sc[i] = expf(z[i] - l);
      if (s.pre_softmax) {
        for (int64_t j = 0; j < kk; ++j) p[j] = sc[pick[j]];
      } else {
        float sel = 0;
        for (int64_t j = 0; j < kk; ++j) sel += expf(z[pick[j]] - zmax);
        for (int64_t j = 0; j < kk; ++j) p[j] = expf(z[pick[j]] - zmax) / sel;
      }
    } else {
      float all = 0;
      for (int64_t i = 0; i < e_count; ++i) all += sc[i] = sigmoid(z[i]);
      float sel = 0;
      for (int64_t j = 0; j < kk; ++j) sel += p[j] = sc[pick[j]];
      if (kk > 1)
        for (int64_t j = 0; j < kk; ++j) p[j] /= sel + kSigmoidSumEps;
      if (kk > 1)
        for (int64_t i = 0; i < e_count; ++i) sc[i] /= all + kSigmoidSumEps;
    }
    if (s.topk_scale != 1.0f)
      for (int64_t j = 0; j < kk; ++j) p[j] *= s.topk_scale;
  }
}

__global__ void router_backward_kernel(RouteShape s, const float* logits, const float* scores,
                                       const float* probs, const float* lse, const int32_t* chosen,
                                       const float* dprobs, const int64_t* aux_counts, double aux_factor,
                                       float z_grad, float* dlogits) {
  const int64_t e_count = s.experts, kk = s.topk;
  for (int64_t t = global_thread(); t < s.tokens; t += grid_threads()) {
    const float* z = logits + t * e_count;
    const float* sc = scores + t * e_count;
    const int32_t* pick = chosen + t * kk;
    // With moe_router_topk_scaling_factor f the kept probabilities are f p and dprobs is the
    // gradient of f p: the formulas take p and f dprobs (router.cpp).
    const float* kept = probs + t * kk;
    const float* dkept = dprobs + t * kk;
    const auto p = [&](int64_t j) { return kept[j] / s.topk_scale; };
    const auto dp = [&](int64_t j) { return dkept[j] * s.topk_scale; };
    float* dz = dlogits + t * e_count;
    for (int64_t i = 0; i < e_count; ++i) dz[i] = 0;
    float pdp = 0;
    for (int64_t j = 0; j < kk; ++j) pdp += p(j) * dp(j);
    if (!s.sigmoid && !s.pre_softmax) {
      for (int64_t j = 0; j < kk; ++j) dz[pick[j]] += p(j) * (dp(j) - pdp);
    } else if (!s.sigmoid) {
      for (int64_t i = 0; i < e_count; ++i) dz[i] -= sc[i] * pdp;
      for (int64_t j = 0; j < kk; ++j) dz[pick[j]] += p(j) * dp(j);
    } else {
      float sel = 0;
      for (int64_t j = 0; j < kk; ++j) sel += sigmoid(z[pick[j]]);
      for (int64_t j = 0; j < kk; ++j) {
        const float sg = sigmoid(z[pick[j]]);
        const float dsg = kk > 1 ? (dp(j) - pdp) / (sel + kSigmoidSumEps) : dp(j);
        dz[pick[j]] += dsg * sg * (1.0f - sg);
      }
    }
    if (aux_counts != nullptr) {
      // d aux / d s_ti = aux_factor count_i, the same for every token (rounded to float as there).
      float sg = 0;
      for (int64_t i = 0; i < e_count; ++i)
        sg += sc[i] * static_cast<float>(aux_factor * static_cast<double>(aux_counts[i]));
      if (!s.sigmoid) {
        for (int64_t i = 0; i < e_count; ++i)
          dz[i] += sc[i] * (static_cast<float>(aux_factor * static_cast<double>(aux_counts[i])) - sg);
      } else if (kk == 1) {
        for (int64_t i = 0; i < e_count; ++i) {
          const float sig = sigmoid(z[i]);
          dz[i] += static_cast<float>(aux_factor * static_cast<double>(aux_counts[i])) * sig * (1.0f - sig);
        }
      } else {
        float all = 0;
        for (int64_t i = 0; i < e_count; ++i) all += sigmoid(z[i]);
        for (int64_t i = 0; i < e_count; ++i) {
          const float sig = sigmoid(z[i]);
          const float g = static_cast<float>(aux_factor * static_cast<double>(aux_counts[i]));
          dz[i] += (g - sg) / (all + kSigmoidSumEps) * sig * (1.0f - sig);
        }
      }
    }
    if (z_grad != 0.0f)
      for (int64_t i = 0; i < e_count; ++i) dz[i] += z_grad * lse[t] * expf(z[i] - lse[t]);
  }
}

// One block per expert: its count over every pair, as a tree of per-thread counts.
__global__ void count_kernel(int64_t pairs, const int32_t* ids, int64_t* counts) {
  const int32_t e = static_cast<int32_t>(blockIdx.x);
  long long mine = 0;
  for (int64_t i = threadIdx.x; i < pairs; i += kReduceThreads) mine += ids[i] == e ? 1 : 0;
  const long long total = block_sum<long long>(mine);
  if (threadIdx.x == 0) counts[e] = static_cast<int64_t>(total);
}

// One block per column: strided per-thread sums in double, then the block's tree.
__global__ void column_sum_kernel(int64_t rows, int64_t cols, const float* x, bool square, double* out) {
  const int64_t c = blockIdx.x;
  double mine = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kReduceThreads) {
    const double v = static_cast<double>(x[r * cols + c]);
    mine += square ? v * v : v;
  }
  const double total = block_sum<double>(mine);
  if (threadIdx.x == 0) out[c] = total;
}

}  // namespace

void route_tokens(const RouteShape& s, const float* logits, const float* bias, int32_t* chosen,
                  int32_t* plain, float* scores, float* probs, float* lse, double* selection,
                  double* group_scores, cudaStream_t stream) {
  if (s.tokens == 0) return;
  route_kernel<<<blocks_for(s.tokens), kThreads, 0, stream>>>(s, logits, bias, chosen, plain, scores, probs,
                                                              lse, selection, group_scores);
  check_launch("moe.layer route_kernel");
}

void router_backward(const RouteShape& s, const float* logits, const float* scores, const float* probs,
                     const float* lse, const int32_t* chosen, const float* dprobs, const int64_t* aux_counts,
                     double aux_factor, float z_grad, float* dlogits, cudaStream_t stream) {
  if (s.tokens == 0) return;
  router_backward_kernel<<<blocks_for(s.tokens), kThreads, 0, stream>>>(
      s, logits, scores, probs, lse, chosen, dprobs, aux_counts, aux_factor, z_grad, dlogits);
  check_launch("moe.layer router_backward_kernel");
}

void count_by_expert(int64_t pairs, int64_t experts, const int32_t* ids, int64_t* counts,
                     cudaStream_t stream) {
  if (experts == 0) return;
  count_kernel<<<static_cast<unsigned>(experts), kReduceThreads, 0, stream>>>(pairs, ids, counts);
  check_launch("moe.layer count_kernel");
}

void column_sums(int64_t rows, int64_t cols, const float* x, bool square, double* out, cudaStream_t stream) {
  if (cols == 0) return;
  column_sum_kernel<<<static_cast<unsigned>(cols), kReduceThreads, 0, stream>>>(rows, cols, x, square, out);
  check_launch("moe.layer column_sum_kernel");
}

}  // namespace plexus::moe::cuda

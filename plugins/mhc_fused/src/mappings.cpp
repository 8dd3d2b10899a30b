// mappings: per token, with W = n*n + 2n logits laid out [pre n | post n | res n*n],
//   h = r * p * alpha + b      (alpha_pre on the pre part, alpha_post on post, alpha_res on res)
//   H_pre = sigmoid(h_pre);  H_post = 2 * sigmoid(h_post);  H_res = Sinkhorn(h_res as n x n)
// One pass over tokens in groups of kLanes (sinkhorn.hpp), one thread per contiguous range of
// groups: per group, h is formed from p, r, alpha, b and used at once (never stored), the
// sigmoids are written, and all K Sinkhorn iterations run on the group's matrices in L1 (on the
// stack for n <= 8). Backward recomputes h and the iterates per group (the family keeps nothing
// between calls), runs the chain rule back through them, and writes dp and dr and adds to the
// per-thread sums of dalpha and db in the same pass; those are combined in thread order.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "fused.hpp"
#include "simd.hpp"
#include "sinkhorn.hpp"
#include "small_array.hpp"
#include "team.hpp"

namespace plexus::mhc_fused {
namespace {

// The working arrays of a group live on the stack up to n = 8.
constexpr std::size_t kInlineMatrix = 8 * 8;

// 1 / (1 + exp(-x)), written so that exp never overflows.
template <class T>
PLEXUS_MHC_FUSED_INLINE T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// The inputs of the mappings and the rounding of h, exactly as the reference rounds it:
// ((r * p) * alpha) + b.
template <class T>
struct Logits {
  const T* p;
  const T* r;
  const T* b;
  std::array<T, 3> alpha;  // pre, post, res
  std::size_t n;
  std::size_t width;

  PLEXUS_MHC_FUSED_INLINE std::size_t group(std::size_t k) const { return k < n ? 0 : k < 2 * n ? 1 : 2; }
  PLEXUS_MHC_FUSED_INLINE T h(std::size_t t, std::size_t k) const {
    return r[t] * p[t * width + k] * alpha[group(k)] + b[k];
  }
};

template <class T>
Logits<T> logits_of(const MhcProblem& pb, const T* p, const T* r, const T* alpha, const T* b) {
  return {p,
          r,
          b,
          {alpha[0], alpha[1], alpha[2]},
          static_cast<std::size_t>(pb.streams),
          static_cast<std::size_t>(pb.width)};
}

// Work of one token for the threading decision: about 6 n^2 operations per Sinkhorn iteration.
double mapping_work(const MhcProblem& pb) {
  return static_cast<double>(pb.tokens) *
         (6.0 * static_cast<double>(pb.iterations) * static_cast<double>(pb.streams * pb.streams) +
          static_cast<double>(pb.width));
}

// Token of lane l of the group starting at t0 with `count` real tokens: lanes past the end
// repeat the last token, so the padding computes on ordinary values and is never stored.
PLEXUS_MHC_FUSED_INLINE std::size_t lane_token(std::size_t t0, std::size_t count, std::size_t l) {
  return t0 + std::min(l, count - 1);
}

template <class T>
struct Forward {
  Logits<T> lg;
  LaneSinkhorn<T> sinkhorn;
  T* h_pre;
  T* h_post;
  T* h_res;
  std::size_t tokens;
};

// The lane groups [begin, end) of the tokens.
template <class T>
PLEXUS_MHC_FUSED_INLINE void forward_groups(const Forward<T>& a, int64_t begin, int64_t end) {
  constexpr std::size_t L = kLanes<T>;
  const Logits<T>& lg = a.lg;
  const std::size_t n = lg.n, nn = n * n;
  SmallArray<T, kInlineMatrix * L> res(a.sinkhorn.matrix());
  for (int64_t g = begin; g < end; ++g) {
    const std::size_t t0 = static_cast<std::size_t>(g) * L;
    const std::size_t count = std::min(L, a.tokens - t0);
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t t = lane_token(t0, count, l);
      for (std::size_t e = 0; e < nn; ++e) res[e * L + l] = lg.h(t, 2 * n + e);
      if (l >= count) continue;
      for (std::size_t i = 0; i < n; ++i) {
        a.h_pre[t * n + i] = sigmoid(lg.h(t, i));
        a.h_post[t * n + i] = T(2) * sigmoid(lg.h(t, n + i));
      }
    }
    a.sinkhorn.forward(res.data());
    for (std::size_t l = 0; l < count; ++l)
      for (std::size_t e = 0; e < nn; ++e) a.h_res[(t0 + l) * nn + e] = res[e * L + l];
  }
}

template <class T>
struct Backward {
  Logits<T> lg;
  LaneSinkhorn<T> sinkhorn;
  const T* dh_pre;
  const T* dh_post;
  const T* dh_res;
  T* dp;  // optional: nullptr when not wanted
  T* dr;  // optional
  std::size_t tokens;
};

// The lane groups [begin, end); adds to sums: dalpha's three, then db's W (double).
template <class T>
PLEXUS_MHC_FUSED_INLINE void backward_groups(const Backward<T>& a, int64_t begin, int64_t end, Acc* sums) {
  constexpr std::size_t L = kLanes<T>;
  const Logits<T>& lg = a.lg;
  const std::size_t n = lg.n, nn = n * n, w = lg.width;
  Acc* dalpha = sums;
  Acc* db = sums + 3;
  SmallArray<T, kInlineMatrix * L> logits(a.sinkhorn.matrix());
  SmallArray<T, kInlineMatrix * L> grad(a.sinkhorn.matrix());  // dH_res in, dh_res out
  SmallArray<T, 8 * 8 + 2 * 8> dh(w);                          // one token's logit gradient
  std::vector<T> iterates(a.sinkhorn.iterates_size());         // K-dependent: on the heap
  for (int64_t g = begin; g < end; ++g) {
    const std::size_t t0 = static_cast<std::size_t>(g) * L;
    const std::size_t count = std::min(L, a.tokens - t0);
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t t = lane_token(t0, count, l);
      for (std::size_t e = 0; e < nn; ++e) {
        logits[e * L + l] = lg.h(t, 2 * n + e);
        grad[e * L + l] = a.dh_res[t * nn + e];
      }
    }
    a.sinkhorn.backward(logits.data(), grad.data(), iterates.data());

    for (std::size_t l = 0; l < count; ++l) {
      const std::size_t t = t0 + l;
      // sigmoid'(x) = sigmoid(x) * sigmoid(-x): no cancellation in 1 - sigmoid(x) for large x.
      for (std::size_t i = 0; i < n; ++i) {
        const T x_pre = lg.h(t, i);
        dh[i] = a.dh_pre[t * n + i] * sigmoid(x_pre) * sigmoid(-x_pre);
        const T x_post = lg.h(t, n + i);
        dh[n + i] = a.dh_post[t * n + i] * T(2) * sigmoid(x_post) * sigmoid(-x_post);
      }
      for (std::size_t e = 0; e < nn; ++e) dh[2 * n + e] = grad[e * L + l];

      // h = r * p * alpha + b: all four gradients from the same dh, in the reference's order.
      const T r = lg.r[t];
      const T* p = lg.p + t * w;
      Acc dr_sum = 0;
      for (std::size_t k = 0; k < w; ++k) {
        const T alpha = lg.alpha[lg.group(k)];
        db[k] += dh[k];
        dalpha[lg.group(k)] += static_cast<Acc>(dh[k]) * r * p[k];
        dr_sum += static_cast<Acc>(dh[k]) * p[k] * alpha;
        if (a.dp != nullptr) a.dp[t * w + k] = dh[k] * r * alpha;
      }
      if (a.dr != nullptr) a.dr[t] = static_cast<T>(dr_sum);
    }
  }
}

PLEXUS_MHC_FUSED_CLONES void mappings_groups_f32(const Forward<float>& a, int64_t begin, int64_t end) {
  forward_groups(a, begin, end);
}
PLEXUS_MHC_FUSED_CLONES void mappings_groups_f64(const Forward<double>& a, int64_t begin, int64_t end) {
  forward_groups(a, begin, end);
}
PLEXUS_MHC_FUSED_CLONES void mappings_grad_groups_f32(const Backward<float>& a, int64_t begin, int64_t end,
                                                      Acc* sums) {
  backward_groups(a, begin, end, sums);
}
PLEXUS_MHC_FUSED_CLONES void mappings_grad_groups_f64(const Backward<double>& a, int64_t begin, int64_t end,
                                                      Acc* sums) {
  backward_groups(a, begin, end, sums);
}
void run_groups(const Forward<float>& a, int64_t begin, int64_t end) {
  mappings_groups_f32(a, begin, end);
}
void run_groups(const Forward<double>& a, int64_t begin, int64_t end) {
  mappings_groups_f64(a, begin, end);
}
void run_groups(const Backward<float>& a, int64_t begin, int64_t end, Acc* sums) {
  mappings_grad_groups_f32(a, begin, end, sums);
}
void run_groups(const Backward<double>& a, int64_t begin, int64_t end, Acc* sums) {
  mappings_grad_groups_f64(a, begin, end, sums);
}

int64_t group_count(const MhcProblem& pb, int64_t lanes) {
  return (pb.tokens + lanes - 1) / lanes;
}

}  // namespace

template <class T>
void CpuPrimitives<T>::mappings_forward(const MhcProblem& pb, const plx_mhc_mappings_forward_args& a) {
  if (pb.tokens == 0) return;
  const Forward<T> args{logits_of(pb, mhc_in<T>(a.p), mhc_in<T>(a.r), mhc_in<T>(a.alpha), mhc_in<T>(a.b)),
                        LaneSinkhorn<T>(pb.streams, pb.iterations, static_cast<T>(pb.eps)),
                        mhc_out<T>(a.h_pre),
                        mhc_out<T>(a.h_post),
                        mhc_out<T>(a.h_res),
                        static_cast<std::size_t>(pb.tokens)};
  const int64_t groups = group_count(pb, kLanes<T>);
  run_parts(part_count(groups, mapping_work(pb)), [&](int part, int parts) {
    const Range mine = part_range(groups, part, parts);
    run_groups(args, mine.begin, mine.end);
  });
}

template <class T>
void CpuPrimitives<T>::mappings_backward(const MhcProblem& pb, const plx_mhc_mappings_backward_args& a) {
  const Backward<T> args{logits_of(pb, mhc_in<T>(a.p), mhc_in<T>(a.r), mhc_in<T>(a.alpha), mhc_in<T>(a.b)),
                         LaneSinkhorn<T>(pb.streams, pb.iterations, static_cast<T>(pb.eps)),
                         mhc_in<T>(a.dh_pre),
                         mhc_in<T>(a.dh_post),
                         mhc_in<T>(a.dh_res),
                         mhc_out_if<T>(a.dp),
                         mhc_out_if<T>(a.dr),
                         static_cast<std::size_t>(pb.tokens)};
  T* dalpha = mhc_out_if<T>(a.dalpha);
  T* db = mhc_out_if<T>(a.db);
  if (pb.tokens == 0 || (args.dp == nullptr && args.dr == nullptr && dalpha == nullptr && db == nullptr))
    return;

  // Per part: dalpha's three sums, then db's W, in double; combined in part order below.
  const int64_t groups = group_count(pb, kLanes<T>);
  const int parts = part_count(groups, 3.0 * mapping_work(pb));
  const std::size_t w = args.lg.width, sums_size = 3 + w;
  std::vector<Acc> sums(static_cast<std::size_t>(parts) * sums_size, 0.0);
  run_parts(parts, [&](int part, int) {
    const Range mine = part_range(groups, part, parts);
    run_groups(args, mine.begin, mine.end, sums.data() + static_cast<std::size_t>(part) * sums_size);
  });

  for (int part = 1; part < parts; ++part)
    for (std::size_t k = 0; k < sums_size; ++k)
      sums[k] += sums[static_cast<std::size_t>(part) * sums_size + k];
  if (dalpha != nullptr)
    for (std::size_t k = 0; k < 3; ++k) dalpha[k] += static_cast<T>(sums[k]);
  if (db != nullptr)
    for (std::size_t k = 0; k < w; ++k) db[k] += static_cast<T>(sums[3 + k]);
}

PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, mappings, float);
PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, mappings, double);

}  // namespace plexus::mhc_fused

// mappings: per token, with W = n*n + 2n logits laid out [pre n | post n | res n*n],
//   h = r * p * alpha + b      (alpha_pre on the pre part, alpha_post on post, alpha_res on res)
//   H_pre = sigmoid(h_pre);  H_post = 2 * sigmoid(h_post);  H_res = Sinkhorn(h_res as n x n)
// Tokens go in blocks so that the Sinkhorn iterates backward keeps stay small whatever T is;
// within a block each step is one eager pass. Backward recomputes h and the iterates from p, r,
// alpha and b: the family saves nothing between forward and backward.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "native.hpp"
#include "sinkhorn.hpp"

namespace plexus::mhc_native {
namespace {

// Which alpha scales logit k: 0 (pre), 1 (post) or 2 (res).
std::size_t alpha_group(std::size_t k, std::size_t n) {
  return k < n ? 0 : k < 2 * n ? 1 : 2;
}

// 1 / (1 + exp(-x)), written so that exp never overflows.
template <class T>
T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// Tokens per block: about 2^20 values of Sinkhorn iterates and logits.
int64_t block_tokens(const MhcProblem& p) {
  const int64_t per_token = p.iterations * (2 * p.streams * p.streams + 4 * p.streams) + 2 * p.width;
  return std::max<int64_t>(1, (int64_t{1} << 20) / per_token);
}

// h for tokens [t0, t0 + count), as [count, W].
template <class T>
void compute_h(const MhcProblem& pb, const T* p, const T* r, const T* alpha, const T* b, int64_t t0,
               int64_t count, std::vector<T>& h) {
  const auto n = static_cast<std::size_t>(pb.streams);
  const auto w = static_cast<std::size_t>(pb.width);
  const auto tokens = static_cast<std::size_t>(count);
  const auto first = static_cast<std::size_t>(t0);
  h.resize(tokens * w);
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t k = 0; k < w; ++k) h[t * w + k] = r[first + t] * p[(first + t) * w + k];
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t k = 0; k < w; ++k) h[t * w + k] *= alpha[alpha_group(k, n)];
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t k = 0; k < w; ++k) h[t * w + k] += b[k];
}

}  // namespace

template <class T>
void CpuPrimitives<T>::mappings_forward(const MhcProblem& pb, const plx_mhc_mappings_forward_args& a) {
  const T* p = mhc_in<T>(a.p);
  const T* r = mhc_in<T>(a.r);
  const T* alpha = mhc_in<T>(a.alpha);
  const T* b = mhc_in<T>(a.b);
  T* h_pre = mhc_out<T>(a.h_pre);
  T* h_post = mhc_out<T>(a.h_post);
  T* h_res = mhc_out<T>(a.h_res);
  const auto n = static_cast<std::size_t>(pb.streams);
  const auto w = static_cast<std::size_t>(pb.width);

  Sinkhorn<T> sinkhorn(pb.streams, pb.iterations, static_cast<T>(pb.eps));
  std::vector<T> h, post_sigmoid;
  const int64_t block = block_tokens(pb);
  for (int64_t t0 = 0; t0 < pb.tokens; t0 += block) {
    const int64_t count = std::min(block, pb.tokens - t0);
    const auto tokens = static_cast<std::size_t>(count);
    const std::size_t first = static_cast<std::size_t>(t0);
    compute_h(pb, p, r, alpha, b, t0, count, h);

    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t i = 0; i < n; ++i) h_pre[(first + t) * n + i] = sigmoid(h[t * w + i]);

    post_sigmoid.resize(tokens * n);
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t i = 0; i < n; ++i) post_sigmoid[t * n + i] = sigmoid(h[t * w + n + i]);
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t i = 0; i < n; ++i) h_post[(first + t) * n + i] = T(2) * post_sigmoid[t * n + i];

    sinkhorn.forward(count, h.data() + 2 * n, pb.width, h_res + first * n * n);
  }
}

template <class T>
void CpuPrimitives<T>::mappings_backward(const MhcProblem& pb, const plx_mhc_mappings_backward_args& a) {
  const T* p = mhc_in<T>(a.p);
  const T* r = mhc_in<T>(a.r);
  const T* alpha = mhc_in<T>(a.alpha);
  const T* b = mhc_in<T>(a.b);
  const T* dh_pre = mhc_in<T>(a.dh_pre);
  const T* dh_post = mhc_in<T>(a.dh_post);
  const T* dh_res = mhc_in<T>(a.dh_res);
  T* dp = mhc_out_if<T>(a.dp);
  T* dr = mhc_out_if<T>(a.dr);
  T* dalpha = mhc_out_if<T>(a.dalpha);
  T* db = mhc_out_if<T>(a.db);
  const auto n = static_cast<std::size_t>(pb.streams);
  const auto w = static_cast<std::size_t>(pb.width);

  // Parameter gradients are summed over all tokens first and added once at the end.
  std::array<Acc, 3> dalpha_sum{};
  std::vector<Acc> db_sum(w, 0.0);

  Sinkhorn<T> sinkhorn(pb.streams, pb.iterations, static_cast<T>(pb.eps));
  std::vector<T> h, h_res, dh;
  const int64_t block = block_tokens(pb);
  for (int64_t t0 = 0; t0 < pb.tokens; t0 += block) {
    const int64_t count = std::min(block, pb.tokens - t0);
    const auto tokens = static_cast<std::size_t>(count);
    const std::size_t first = static_cast<std::size_t>(t0);
    compute_h(pb, p, r, alpha, b, t0, count, h);
    h_res.resize(tokens * n * n);
    sinkhorn.forward(count, h.data() + 2 * n, pb.width, h_res.data());  // recompute the iterates

    dh.resize(tokens * w);
    // sigmoid'(x) = sigmoid(x) * sigmoid(-x): no cancellation in 1 - sigmoid(x) for large x.
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t i = 0; i < n; ++i) {
        const T x = h[t * w + i];
        dh[t * w + i] = dh_pre[(first + t) * n + i] * sigmoid(x) * sigmoid(-x);
      }
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t i = 0; i < n; ++i) {
        const T x = h[t * w + n + i];
        dh[t * w + n + i] = dh_post[(first + t) * n + i] * T(2) * sigmoid(x) * sigmoid(-x);
      }
    sinkhorn.backward(dh_res + first * n * n, dh.data() + 2 * n, pb.width);

    // h = r * p * alpha + b, one gradient at a time.
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t k = 0; k < w; ++k) db_sum[k] += dh[t * w + k];
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t k = 0; k < w; ++k)
        dalpha_sum[alpha_group(k, n)] +=
            static_cast<Acc>(dh[t * w + k]) * r[first + t] * p[(first + t) * w + k];
    if (dr != nullptr)
      for (std::size_t t = 0; t < tokens; ++t) {
        Acc s = 0;
        for (std::size_t k = 0; k < w; ++k)
          s += static_cast<Acc>(dh[t * w + k]) * p[(first + t) * w + k] * alpha[alpha_group(k, n)];
        dr[first + t] = static_cast<T>(s);
      }
    if (dp != nullptr)
      for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t k = 0; k < w; ++k)
          dp[(first + t) * w + k] = dh[t * w + k] * r[first + t] * alpha[alpha_group(k, n)];
  }

  if (dalpha != nullptr)
    for (std::size_t g = 0; g < 3; ++g) dalpha[g] += static_cast<T>(dalpha_sum[g]);
  if (db != nullptr)
    for (std::size_t k = 0; k < w; ++k) db[k] += static_cast<T>(db_sum[k]);
}

PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, mappings, float);
PLEXUS_MHC_INSTANTIATE_PAIR(CpuPrimitives, mappings, double);

}  // namespace plexus::mhc_native

// mappings on CUDA, pass for pass as ../mappings.cpp: per token, W = n*n + 2n logits laid out
// [pre n | post n | res n*n],
//   h = r * p * alpha + b      (alpha_pre on the pre part, alpha_post on post, alpha_res on res)
//   H_pre = sigmoid(h_pre);  H_post = 2 * sigmoid(h_post);  H_res = Sinkhorn(h_res as n x n)
// h and its gradient are whole-batch temporaries; the Sinkhorn iterates go in blocks of tokens
// so their memory stays bounded whatever T is. Backward recomputes h and the iterates from p, r,
// alpha and b (the family saves nothing between forward and backward).
#include <algorithm>

#include "passes.cuh"
#include "plexus_cuda_kernels/scratch_layout.hpp"
#include "primitives.hpp"
#include "sinkhorn.hpp"

namespace plexus::mhc_native::gpu {
namespace {

// Which alpha scales logit k: 0 (pre), 1 (post) or 2 (res).
__device__ int64_t alpha_group(int64_t k, int64_t n) {
  return k < n ? 0 : k < 2 * n ? 1 : 2;
}

// 1 / (1 + exp(-x)), written so that exp never overflows.
__device__ float sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

// Tokens per Sinkhorn block: about 2^22 floats (16 MiB) of iterates and temporaries.
int64_t block_tokens(const MhcProblem& p) {
  const int64_t per_token = p.iterations * (2 * p.streams * p.streams + 4 * p.streams) + 3 * p.streams * p.streams;
  return std::clamp<int64_t>((int64_t{1} << 22) / per_token, 1, std::max<int64_t>(p.tokens, 1));
}

// ---- h = r * p * alpha + b, one pass per operation ----

struct RTimesP {
  const float* r;
  const float* p;
  int64_t w;
  float* h;
  __device__ void operator()(int64_t i) const { h[i] = r[i / w] * p[i]; }
};
struct TimesAlpha {
  const float* alpha;
  int64_t w, n;
  float* h;
  __device__ void operator()(int64_t i) const { h[i] *= alpha[alpha_group(i % w, n)]; }
};
struct PlusB {
  const float* b;
  int64_t w;
  float* h;
  __device__ void operator()(int64_t i) const { h[i] += b[i % w]; }
};

void compute_h(cudaStream_t stream, const MhcProblem& pb, const float* p, const float* r, const float* alpha,
               const float* b, float* h) {
  const int64_t count = pb.tokens * pb.width;
  for_each(stream, count, RTimesP{r, p, pb.width, h}, "mhc_native mappings: r * p");
  for_each(stream, count, TimesAlpha{alpha, pb.width, pb.streams, h}, "mhc_native mappings: * alpha");
  for_each(stream, count, PlusB{b, pb.width, h}, "mhc_native mappings: + b");
}

// out[t, i] = sigmoid(h[t, offset + i]) for the n logits of one part.
struct SigmoidOfPart {
  const float* h;
  int64_t w, n, offset;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = sigmoid(h[i / n * w + offset + i % n]); }
};
struct Twice {
  const float* in;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = 2.0f * in[i]; }
};

// ---- backward ----

// dh[t, offset + i] = upstream[t, i] * factor * sigmoid(x) * sigmoid(-x) with x = h[t, offset + i]:
// sigmoid'(x) = sigmoid(x) * sigmoid(-x) has no cancellation in 1 - sigmoid(x) for large x. The
// pre part has no factor (the CPU's expression has none either); the post part has 2.
struct ThroughSigmoid {
  const float* upstream;
  const float* h;
  int64_t w, n, offset;
  bool doubled;
  float* dh;
  __device__ void operator()(int64_t i) const {
    const int64_t at = i / n * w + offset + i % n;
    const float x = h[at];
    dh[at] = doubled ? upstream[i] * 2.0f * sigmoid(x) * sigmoid(-x) : upstream[i] * sigmoid(x) * sigmoid(-x);
  }
};

// group_sums[t, g] = sum over the logits k of group g of dh * r * p, in double.
struct AlphaTerms {
  const float* dh;
  const float* r;
  const float* p;
  int64_t w, n;
  double* group_sums;
  __device__ void operator()(int64_t t) const {
    double s[3] = {0, 0, 0};
    for (int64_t k = 0; k < w; ++k)
      s[alpha_group(k, n)] += static_cast<double>(dh[t * w + k]) * r[t] * p[t * w + k];
    for (int g = 0; g < 3; ++g) group_sums[t * 3 + g] = s[g];
  }
};

struct DR {  // dr[t] = sum_k dh * p * alpha, in double
  const float* dh;
  const float* p;
  const float* alpha;
  int64_t w, n;
  float* dr;
  __device__ void operator()(int64_t t) const {
    double s = 0;
    for (int64_t k = 0; k < w; ++k)
      s += static_cast<double>(dh[t * w + k]) * p[t * w + k] * alpha[alpha_group(k, n)];
    dr[t] = static_cast<float>(s);
  }
};

struct DP {  // dp[t, k] = dh * r * alpha
  const float* dh;
  const float* r;
  const float* alpha;
  int64_t w, n;
  float* dp;
  __device__ void operator()(int64_t i) const { dp[i] = dh[i] * r[i / w] * alpha[alpha_group(i % w, n)]; }
};

}  // namespace

template <class A>
void CudaPrimitives<A>::mappings_forward(Handle& handle, const MhcProblem& pb,
                                         const plx_mhc_mappings_forward_args& a) {
  if (pb.tokens == 0) return;
  const int64_t n = pb.streams, w = pb.width, block = block_tokens(pb);
  struct Temps {
    float* h;             // [T, W]
    float* post_sigmoid;  // [T, n]
    DeviceSinkhorn sinkhorn;
  };
  Temps t = cuda_kernels::carve_scratch(handle, [&](cuda_kernels::ScratchLayout& ws) {
    float* h = ws.take<float>(pb.tokens * w);
    float* post_sigmoid = ws.take<float>(pb.tokens * n);
    return Temps{h, post_sigmoid, DeviceSinkhorn(n, pb.iterations, static_cast<float>(pb.eps), block, ws)};
  });
  cudaStream_t stream = handle.stream();
  compute_h(stream, pb, mhc_in<float>(a.p), mhc_in<float>(a.r), mhc_in<float>(a.alpha), mhc_in<float>(a.b),
            t.h);

  for_each(stream, pb.tokens * n, SigmoidOfPart{t.h, w, n, 0, mhc_out<float>(a.h_pre)},
           "mhc_native mappings: H_pre");
  for_each(stream, pb.tokens * n, SigmoidOfPart{t.h, w, n, n, t.post_sigmoid}, "mhc_native mappings: sigmoid");
  for_each(stream, pb.tokens * n, Twice{t.post_sigmoid, mhc_out<float>(a.h_post)},
           "mhc_native mappings: H_post");

  float* h_res = mhc_out<float>(a.h_res);
  for (int64_t t0 = 0; t0 < pb.tokens; t0 += block) {
    const int64_t count = std::min(block, pb.tokens - t0);
    t.sinkhorn.forward(stream, count, t.h + t0 * w + 2 * n, w, h_res + t0 * n * n);
  }
}

template <class A>
void CudaPrimitives<A>::mappings_backward(Handle& handle, const MhcProblem& pb,
                                          const plx_mhc_mappings_backward_args& a) {
  if (pb.tokens == 0) return;
  const int64_t n = pb.streams, w = pb.width, block = block_tokens(pb);
  const float* p = mhc_in<float>(a.p);
  const float* r = mhc_in<float>(a.r);
  const float* alpha = mhc_in<float>(a.alpha);
  const float* dh_res = mhc_in<float>(a.dh_res);
  float* dp = mhc_out_if<float>(a.dp);
  float* dr = mhc_out_if<float>(a.dr);
  float* dalpha = mhc_out_if<float>(a.dalpha);
  float* db = mhc_out_if<float>(a.db);

  struct Temps {
    float* h;            // [T, W]
    float* dh;           // [T, W]
    float* h_res;        // [block, n, n]: the recomputed forward output (unused but written)
    double* group_sums;  // [T, 3]
    double* partials;    // column sums over tokens
    DeviceSinkhorn sinkhorn;
  };
  Temps t = cuda_kernels::carve_scratch(handle, [&](cuda_kernels::ScratchLayout& ws) {
    float* h = ws.take<float>(pb.tokens * w);
    float* dh = ws.take<float>(pb.tokens * w);
    float* h_res = ws.take<float>(block * n * n);
    double* group_sums = ws.take<double>(pb.tokens * 3);
    double* partials = ws.take<double>(column_partials(pb.tokens, w));  // w >= 3 covers dalpha too
    return Temps{h, dh, h_res, group_sums, partials,
                 DeviceSinkhorn(n, pb.iterations, static_cast<float>(pb.eps), block, ws)};
  });
  cudaStream_t stream = handle.stream();
  compute_h(stream, pb, p, r, alpha, mhc_in<float>(a.b), t.h);

  for_each(stream, pb.tokens * n, ThroughSigmoid{mhc_in<float>(a.dh_pre), t.h, w, n, 0, false, t.dh},
           "mhc_native mappings': dh_pre");
  for_each(stream, pb.tokens * n, ThroughSigmoid{mhc_in<float>(a.dh_post), t.h, w, n, n, true, t.dh},
           "mhc_native mappings': dh_post");
  for (int64_t t0 = 0; t0 < pb.tokens; t0 += block) {
    const int64_t count = std::min(block, pb.tokens - t0);
    t.sinkhorn.forward(stream, count, t.h + t0 * w + 2 * n, w, t.h_res);  // recompute the iterates
    t.sinkhorn.backward(stream, dh_res + t0 * n * n, t.dh + t0 * w + 2 * n, w);
  }

  // h = r * p * alpha + b, one gradient at a time. Parameter gradients are summed over all tokens
  // first and added once.
  if (db != nullptr) column_sums_into(stream, t.dh, pb.tokens, w, t.partials, db, "mhc_native mappings': db");
  if (dalpha != nullptr) {
    for_each(stream, pb.tokens, AlphaTerms{t.dh, r, p, w, n, t.group_sums}, "mhc_native mappings': dalpha");
    column_sums_into(stream, t.group_sums, pb.tokens, 3, t.partials, dalpha, "mhc_native mappings': dalpha");
  }
  if (dr != nullptr) for_each(stream, pb.tokens, DR{t.dh, p, alpha, w, n, dr}, "mhc_native mappings': dr");
  if (dp != nullptr)
    for_each(stream, pb.tokens * w, DP{t.dh, r, alpha, w, n, dp}, "mhc_native mappings': dp");
}

PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, mappings, float, Handle&);

}  // namespace plexus::mhc_native::gpu

// mappings on CUDA: per token, with W = n*n + 2n logits laid out [pre n | post n | res n*n],
//   h = r * p * alpha + b      (alpha_pre on the pre part, alpha_post on post, alpha_res on res)
//   H_pre = sigmoid(h_pre);  H_post = 2 * sigmoid(h_post);  H_res = Sinkhorn(h_res as n x n)
// One thread per token: h is formed from p, r, alpha and b and used at once, and all K Sinkhorn
// iterations run on the token's n x n matrix in registers (n in {1, 2, 4, 8}; other n keep the
// matrices in global scratch, one column per token so that a warp's accesses are contiguous).
//
// Backward recomputes h and the iterates, as the CPU backend does (the family keeps nothing
// between calls): the forward sweep stores each iteration's input matrix (K n*n values per token,
// in scratch, token-minor), the backward sweep reloads iteration k's input, redoes its row and
// column division in registers (bit for bit the same values) and runs the chain rule through them.
// dp and dr are written in the same pass; dalpha's and db's per-token terms go to scratch and are
// summed over tokens by the deterministic two-pass column sums (common.cuh).
//
// This file is compiled with -fmad=false: every multiply and add is rounded on its own, in the
// CPU backend's order (which is built with -ffp-contract=off), because h feeds exp: at |h| ~ 1e3
// one ulp of h is 6e-5 of exp(h - max). Division and sqrt are IEEE (no fast math), expf is CUDA's
// (within 2 ulp of the correctly rounded value).
#include "common.cuh"
#include "plexus_cuda_kernels/scratch_layout.hpp"
#include "primitives.hpp"

namespace plexus::mhc_fused::gpu {
namespace {

constexpr int kThreads = 128;

// std::max(a, b) of the CPU backend: a < b ? b : a (a NaN sum stays NaN).
__device__ __forceinline__ float max_like_std(float a, float b) {
  return a < b ? b : a;
}

// 1 / (1 + exp(-x)), written so that exp never overflows.
__device__ __forceinline__ float sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

// ---- a token's matrices and vectors: registers (N > 0, n == N) or global scratch (N == 0) ----

template <int N>
struct Matrix {
  float v[N * N];
  __device__ __forceinline__ float& operator()(int i, int j) { return v[i * N + j]; }
};
template <>
struct Matrix<0> {
  float* base;  // this token's column: element (i, j) at base[(i * n + j) * stride]
  int64_t stride;
  int n;
  __device__ __forceinline__ float& operator()(int i, int j) const {
    return base[(static_cast<int64_t>(i) * n + j) * stride];
  }
};

template <int N>
struct Vector {
  float v[N];
  __device__ __forceinline__ float& operator()(int i) { return v[i]; }
};
template <>
struct Vector<0> {
  float* base;
  int64_t stride;
  __device__ __forceinline__ float& operator()(int i) const { return base[static_cast<int64_t>(i) * stride]; }
};

// Scratch of the N == 0 path per token (floats, token-minor): the matrix, the gradient, the row
// and column sums.
inline int64_t generic_floats(int64_t n) {
  return 2 * n * n + 2 * n;
}

template <int N>
struct Work {
  Matrix<N> a;
  Matrix<N> g;
  Vector<N> rows;
  Vector<N> columns;
  __device__ Work(float*, int64_t, int64_t, int) {}
};
template <>
struct Work<0> {
  Matrix<0> a, g;
  Vector<0> rows, columns;
  // `work`: generic_floats(n) * stride floats; this token is column `slot`.
  __device__ Work(float* work, int64_t stride, int64_t slot, int n)
      : a{work + slot, stride, n},
        g{work + static_cast<int64_t>(n) * n * stride + slot, stride, n},
        rows{work + 2 * static_cast<int64_t>(n) * n * stride + slot, stride},
        columns{work + (2 * static_cast<int64_t>(n) * n + n) * stride + slot, stride} {}
};

// ---- Sinkhorn, element for element as the CPU backend's (../sinkhorn.hpp) ----
// Loops run to n, which is the constant N when N > 0 (fully unrolled: the matrices stay in
// registers) and the problem's n otherwise.

// a = exp(a - rowmax(a)), the row max a constant.
template <int N, class M>
__device__ __forceinline__ void exp_shifted(M& a, int n) {
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i) {
    float top = a(i, 0);
#pragma unroll(N > 0 ? N : 1)
    for (int j = 1; j < n; ++j) top = max_like_std(top, a(i, j));
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) a(i, j) = expf(a(i, j) - top);
  }
}

// a = a / max(row sums, eps), each row; the sums go to `sums`.
template <int N, class M, class V>
__device__ __forceinline__ void divide_rows(M& a, V& sums, int n, float eps) {
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i) {
    float s = 0.0f;
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) s += a(i, j);
    const float den = max_like_std(s, eps);
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) a(i, j) = a(i, j) / den;
    sums(i) = s;
  }
}

// a = a / max(column sums, eps), each column.
template <int N, class M, class V>
__device__ __forceinline__ void divide_columns(M& a, V& sums, int n, float eps) {
#pragma unroll(N > 0 ? N : 1)
  for (int j = 0; j < n; ++j) {
    float s = 0.0f;
#pragma unroll(N > 0 ? N : 1)
    for (int i = 0; i < n; ++i) s += a(i, j);
    const float den = max_like_std(s, eps);
#pragma unroll(N > 0 ? N : 1)
    for (int i = 0; i < n; ++i) a(i, j) = a(i, j) / den;
    sums(j) = s;
  }
}

// The column sums of `a` (after the row division), without dividing.
template <int N, class M, class V>
__device__ __forceinline__ void column_sums(M& a, V& sums, int n) {
#pragma unroll(N > 0 ? N : 1)
  for (int j = 0; j < n; ++j) {
    float s = 0.0f;
#pragma unroll(N > 0 ? N : 1)
    for (int i = 0; i < n; ++i) s += a(i, j);
    sums(j) = s;
  }
}

// Through out = r / d_j (d_j = max(s_j, eps), s_j the column sums of r), in place on g:
//   d r_ij = g_ij / d_j + ds_j,  ds_j = -sum_i g_ij out_ij / d_j  (0 where s_j < eps).
// out_ij = r_ij / d_j is recomputed here (the same division as forward's, so the same value).
template <int N, class M, class V>
__device__ __forceinline__ void columns_backward(M& r, V& sums, M& g, int n, float eps) {
#pragma unroll(N > 0 ? N : 1)
  for (int j = 0; j < n; ++j) {
    const float s = sums(j);
    const float den = max_like_std(s, eps);
    float dot = 0.0f;
#pragma unroll(N > 0 ? N : 1)
    for (int i = 0; i < n; ++i) dot += g(i, j) * (r(i, j) / den);
    const float d_sum = s >= eps ? -dot / den : 0.0f;
#pragma unroll(N > 0 ? N : 1)
    for (int i = 0; i < n; ++i) g(i, j) = g(i, j) / den + d_sum;
  }
}

// The same through the row division: out = r (the rows already divided), sums the row sums of
// the iteration's input.
template <int N, class M, class V>
__device__ __forceinline__ void rows_backward(M& out, V& sums, M& g, int n, float eps) {
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i) {
    const float s = sums(i);
    const float den = max_like_std(s, eps);
    float dot = 0.0f;
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) dot += g(i, j) * out(i, j);
    const float d_sum = s >= eps ? -dot / den : 0.0f;
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) g(i, j) = g(i, j) / den + d_sum;
  }
}

// ---- the logits ----

struct Logits {
  const float* p;
  const float* r;
  const float* alpha;
  const float* b;
  int64_t tokens;
  int n;
};

// h = ((r * p) * alpha) + b, rounded as the CPU backend rounds it.
__device__ __forceinline__ float logit(float r, float p, float alpha, float b) {
  return r * p * alpha + b;
}

// ---- forward ----

struct ForwardArgs {
  Logits lg;
  float* h_pre;
  float* h_post;
  float* h_res;
  int iterations;
  float eps;
  int64_t t0;     // the first token of this launch
  int64_t count;  // tokens of this launch
  float* work;    // N == 0: generic_floats(n) * count floats
};

template <int N>
__global__ void __launch_bounds__(kThreads) mappings_forward_kernel(ForwardArgs a) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (slot >= a.count) return;
  const int64_t t = a.t0 + slot;
  const int n = N > 0 ? N : a.lg.n;
  const int64_t w = static_cast<int64_t>(n) * n + 2 * n;
  const float r = a.lg.r[t];
  const float alpha_pre = a.lg.alpha[0], alpha_post = a.lg.alpha[1], alpha_res = a.lg.alpha[2];
  const float* p = a.lg.p + t * w;
  const float* b = a.lg.b;

#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i) {
    a.h_pre[t * n + i] = sigmoid(logit(r, p[i], alpha_pre, b[i]));
    a.h_post[t * n + i] = 2.0f * sigmoid(logit(r, p[n + i], alpha_post, b[n + i]));
  }

  Work<N> work(a.work, a.count, slot, n);
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i)
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) {
      const int k = 2 * n + i * n + j;
      work.a(i, j) = logit(r, p[k], alpha_res, b[k]);
    }
  exp_shifted<N>(work.a, n);
  for (int k = 0; k < a.iterations; ++k) {
    divide_rows<N>(work.a, work.rows, n, a.eps);
    divide_columns<N>(work.a, work.columns, n, a.eps);
  }
  float* h_res = a.h_res + t * n * n;
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i)
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) h_res[i * n + j] = work.a(i, j);
}

// ---- backward ----

struct BackwardArgs {
  Logits lg;
  const float* dh_pre;
  const float* dh_post;
  const float* dh_res;
  float* dp;            // written; nullptr: not wanted
  float* dr;            // written; nullptr: not wanted
  float* db_terms;      // [T, W]: the logits' gradient, for db; nullptr: not wanted
  double* alpha_terms;  // [T, 3]: this token's terms of dalpha; nullptr: not wanted
  int iterations;
  float eps;
  int64_t t0, count;
  float* iterates;  // [K, n*n, count]: the input of every iteration
  float* work;      // N == 0: generic_floats(n) * count floats
};

// Adds one logit's gradient d (logit k of group `group`) to the token's outputs and terms.
struct Emit {
  float r;
  const float* p;
  const float* alpha;
  float* dp;
  float* db_terms;
  double dr_sum = 0;
  double alpha_sum[3] = {0, 0, 0};

  __device__ __forceinline__ void operator()(int64_t k, int group, float d) {
    const float alpha_k = alpha[group];
    if (db_terms != nullptr) db_terms[k] = d;
    alpha_sum[group] += static_cast<double>(d) * static_cast<double>(r) * static_cast<double>(p[k]);
    dr_sum += static_cast<double>(d) * static_cast<double>(p[k]) * static_cast<double>(alpha_k);
    if (dp != nullptr) dp[k] = d * r * alpha_k;
  }
};

template <int N>
__global__ void __launch_bounds__(kThreads) mappings_backward_kernel(BackwardArgs a) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (slot >= a.count) return;
  const int64_t t = a.t0 + slot;
  const int n = N > 0 ? N : a.lg.n;
  const int nn = n * n;
  const int64_t w = static_cast<int64_t>(nn) + 2 * n;
  const float r = a.lg.r[t];
  const float alpha_res = a.lg.alpha[2];
  const float* p = a.lg.p + t * w;
  const float* b = a.lg.b;
  // Iterate k's element e of this token.
  float* iterates = a.iterates + slot;
  const auto at = [&](int k, int e) -> float& {
    return iterates[(static_cast<int64_t>(k) * nn + e) * a.count];
  };

  Work<N> work(a.work, a.count, slot, n);
  // Forward again, keeping every iteration's input.
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i)
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) {
      const int k = 2 * n + i * n + j;
      work.a(i, j) = logit(r, p[k], alpha_res, b[k]);
    }
  exp_shifted<N>(work.a, n);
  for (int k = 0; k < a.iterations; ++k) {
#pragma unroll(N > 0 ? N : 1)
    for (int i = 0; i < n; ++i)
#pragma unroll(N > 0 ? N : 1)
      for (int j = 0; j < n; ++j) at(k, i * n + j) = work.a(i, j);
    if (k + 1 == a.iterations) break;  // the last output is not needed
    divide_rows<N>(work.a, work.rows, n, a.eps);
    divide_columns<N>(work.a, work.columns, n, a.eps);
  }

  // Back through the iterations: g holds dH_res, then the gradient of each iteration's input.
  const float* dh_res = a.dh_res + t * nn;
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i)
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) work.g(i, j) = dh_res[i * n + j];
  for (int k = a.iterations - 1; k >= 0; --k) {
#pragma unroll(N > 0 ? N : 1)
    for (int i = 0; i < n; ++i)
#pragma unroll(N > 0 ? N : 1)
      for (int j = 0; j < n; ++j) work.a(i, j) = at(k, i * n + j);
    divide_rows<N>(work.a, work.rows, n, a.eps);  // work.a: after the row division
    column_sums<N>(work.a, work.columns, n);
    columns_backward<N>(work.a, work.columns, work.g, n, a.eps);
    rows_backward<N>(work.a, work.rows, work.g, n, a.eps);
  }
  // M = exp(L - rowmax) with the row max constant: dL = dM * M (M is iteration 0's input).
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i)
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) work.g(i, j) = work.g(i, j) * at(0, i * n + j);

  // h = r * p * alpha + b: every gradient from the same dh, in the CPU backend's order.
  // sigmoid'(x) = sigmoid(x) * sigmoid(-x): no cancellation in 1 - sigmoid(x) for large x.
  Emit emit{r, p, a.lg.alpha, a.dp != nullptr ? a.dp + t * w : nullptr,
            a.db_terms != nullptr ? a.db_terms + t * w : nullptr};
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i) {
    const float x = logit(r, p[i], a.lg.alpha[0], b[i]);
    emit(i, 0, a.dh_pre[t * n + i] * sigmoid(x) * sigmoid(-x));
  }
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i) {
    const float x = logit(r, p[n + i], a.lg.alpha[1], b[n + i]);
    emit(n + i, 1, a.dh_post[t * n + i] * 2.0f * sigmoid(x) * sigmoid(-x));
  }
#pragma unroll(N > 0 ? N : 1)
  for (int i = 0; i < n; ++i)
#pragma unroll(N > 0 ? N : 1)
    for (int j = 0; j < n; ++j) emit(2 * n + i * n + j, 2, work.g(i, j));
  if (a.dr != nullptr) a.dr[t] = static_cast<float>(emit.dr_sum);
  if (a.alpha_terms != nullptr)
    for (int g = 0; g < 3; ++g) a.alpha_terms[t * 3 + g] = emit.alpha_sum[g];
}

// ---- launches ----

// Runs fn.template operator()<N>() with N = n for n in {1, 2, 4, 8}, N = 0 otherwise.
template <class Fn>
void with_streams(int64_t n, Fn&& fn) {
  switch (n) {
    case 1:
      fn.template operator()<1>();
      break;
    case 2:
      fn.template operator()<2>();
      break;
    case 4:
      fn.template operator()<4>();
      break;
    case 8:
      fn.template operator()<8>();
      break;
    default:
      fn.template operator()<0>();
      break;
  }
}

bool in_registers(int64_t n) {
  return n == 1 || n == 2 || n == 4 || n == 8;
}

// Tokens per launch when the scratch grows with the tokens: about 2^24 floats (64 MiB) of it, but
// never fewer than 4096 tokens (a launch must still fill the GPU).
int64_t tokens_per_launch(int64_t tokens, int64_t floats_per_token) {
  if (floats_per_token == 0) return tokens;
  const int64_t fit = (int64_t{1} << 24) / floats_per_token;
  return std::clamp<int64_t>(fit, std::min<int64_t>(tokens, 4096), tokens);
}

Logits logits_of(const MhcProblem& pb, const float* p, const float* r, const float* alpha, const float* b) {
  return {p, r, alpha, b, pb.tokens, static_cast<int>(pb.streams)};
}

}  // namespace

template <class A>
void CudaPrimitives<A>::mappings_forward(Handle& handle, const MhcProblem& pb,
                                         const plx_mhc_mappings_forward_args& a) {
  if (pb.tokens == 0) return;
  const int64_t n = pb.streams;
  const int64_t per_token = in_registers(n) ? 0 : generic_floats(n);
  const int64_t chunk = tokens_per_launch(pb.tokens, per_token);
  float* work = cuda_kernels::carve_scratch(
      handle, [&](cuda_kernels::ScratchLayout& s) { return s.take<float>(per_token * chunk); });
  ForwardArgs args{};
  args.lg = logits_of(pb, mhc_in<float>(a.p), mhc_in<float>(a.r), mhc_in<float>(a.alpha), mhc_in<float>(a.b));
  args.h_pre = mhc_out<float>(a.h_pre);
  args.h_post = mhc_out<float>(a.h_post);
  args.h_res = mhc_out<float>(a.h_res);
  args.iterations = pb.iterations;
  args.eps = static_cast<float>(pb.eps);
  args.work = work;
  for (int64_t t0 = 0; t0 < pb.tokens; t0 += chunk) {
    args.t0 = t0;
    args.count = std::min(chunk, pb.tokens - t0);
    const unsigned blocks = static_cast<unsigned>((args.count + kThreads - 1) / kThreads);
    with_streams(
        n, [&]<int N>() { mappings_forward_kernel<N><<<blocks, kThreads, 0, handle.stream()>>>(args); });
    check_launch("mhc_fused mappings forward");
  }
}

template <class A>
void CudaPrimitives<A>::mappings_backward(Handle& handle, const MhcProblem& pb,
                                          const plx_mhc_mappings_backward_args& a) {
  float* dp = mhc_out_if<float>(a.dp);
  float* dr = mhc_out_if<float>(a.dr);
  float* dalpha = mhc_out_if<float>(a.dalpha);
  float* db = mhc_out_if<float>(a.db);
  if (pb.tokens == 0 || (dp == nullptr && dr == nullptr && dalpha == nullptr && db == nullptr)) return;
  const int64_t n = pb.streams, w = pb.width;
  const int64_t per_token = pb.iterations * n * n + (in_registers(n) ? 0 : generic_floats(n));
  const int64_t chunk = tokens_per_launch(pb.tokens, per_token);
  struct Temps {
    float* iterates;
    float* db_terms;
    double* alpha_terms;
    double* partials;
  };
  const Temps t = cuda_kernels::carve_scratch(handle, [&](cuda_kernels::ScratchLayout& s) {
    return Temps{s.take<float>(per_token * chunk), s.take<float>(db != nullptr ? pb.tokens * w : 0),
                 s.take<double>(dalpha != nullptr ? pb.tokens * 3 : 0),
                 s.take<double>(column_partials(pb.tokens, w))};  // w >= 3 covers dalpha too
  });
  cudaStream_t stream = handle.stream();

  BackwardArgs args{};
  args.lg = logits_of(pb, mhc_in<float>(a.p), mhc_in<float>(a.r), mhc_in<float>(a.alpha), mhc_in<float>(a.b));
  args.dh_pre = mhc_in<float>(a.dh_pre);
  args.dh_post = mhc_in<float>(a.dh_post);
  args.dh_res = mhc_in<float>(a.dh_res);
  args.dp = dp;
  args.dr = dr;
  args.db_terms = t.db_terms;
  args.alpha_terms = t.alpha_terms;
  args.iterations = pb.iterations;
  args.eps = static_cast<float>(pb.eps);
  args.iterates = t.iterates;
  // The generic path's matrices follow the iterates in the same piece of scratch.
  args.work = in_registers(n) ? nullptr : t.iterates + pb.iterations * n * n * chunk;
  for (int64_t t0 = 0; t0 < pb.tokens; t0 += chunk) {
    args.t0 = t0;
    args.count = std::min(chunk, pb.tokens - t0);
    const unsigned blocks = static_cast<unsigned>((args.count + kThreads - 1) / kThreads);
    with_streams(n, [&]<int N>() { mappings_backward_kernel<N><<<blocks, kThreads, 0, stream>>>(args); });
    check_launch("mhc_fused mappings backward");
  }
  // Parameter gradients: summed over all tokens in a fixed order, then added once.
  if (db != nullptr)
    column_sums_into(stream, t.db_terms, pb.tokens, w, t.partials, db, "mhc_fused mappings': db");
  if (dalpha != nullptr)
    column_sums_into(stream, t.alpha_terms, pb.tokens, int64_t{3}, t.partials, dalpha,
                     "mhc_fused mappings': dalpha");
}

PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, mappings, float, Handle&);

}  // namespace plexus::mhc_fused::gpu

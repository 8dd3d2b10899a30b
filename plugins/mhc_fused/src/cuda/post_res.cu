// post_res on CUDA: the new residual streams, per token and stream i,
//   y_i = sum_j H(i, j) * x_j + H_post[i] * (f + bias)
// with H(i, j) = H_res[i][j], or H_res[j][i] under PLX_MHC_TRANSPOSED_H_RES.
//
// One warp per token (8 per block of 256 threads); its lanes walk the token's C values in 16-byte
// vectors (4 floats or 8 bf16; scalars when C or an address does not allow it), and the token's
// H and H_post sit in the warp's shared memory. Forward: per position, the lane loads its n
// vectors of x and one of f (and bias), and writes the n vectors of y: x and f read once, y
// written once. Backward, the same walk: the lane loads its n vectors of dy (kept in registers),
// forms df = sum_i H_post[i] dy_i (written once), and per stream j loads x_j and dx_j once,
// writes dx_j += sum_i H(i, j) dy_i and adds <dy_i, x_j> and <dy_i, f + bias> to per-lane partial
// dot products in registers; the warp adds its lanes' partials in double, in lane order, at the
// end of the row (dH_res, dH_post: written once). dbias = sum over tokens of df: the block's 8
// warps walk their rows in step, the block adds its 8 tokens' df in warp order per position into
// one row of block partial sums, and a second pass adds those rows in a fixed order
// (common.cuh). Every output is a function of the sizes and the inputs only: no float atomics.
//
// n > 8 (the generic path): the same walk without dot products (dy and x re-read from cache per
// stream); dH_res and dH_post by one warp per dot product.
//
// Rounding: the n-term sums in float, stream 0 first, and dx += (the sum) as the CPU backend
// does; dot products in float per lane, in double across lanes; fused multiply-adds allowed.
#include "common.cuh"
#include "plexus_cuda_kernels/scratch_layout.hpp"
#include "primitives.hpp"

namespace plexus::mhc_fused::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// H(i, j) of token t in either orientation, and where dH(i, j) is stored (where H(i, j) is read).
__host__ __device__ __forceinline__ int64_t mix_index(int64_t t, int64_t n, bool transposed, int64_t i,
                                                      int64_t j) {
  return transposed ? (t * n + j) * n + i : (t * n + i) * n + j;
}

// ---- forward ----

template <class D>
struct Forward {
  const D* x;
  const float* h_res;
  const float* h_post;
  const D* f;
  const D* bias;  // nullptr: F has none
  D* y;
  int64_t tokens, c;
  int n;
  bool transposed;
};

// f + bias at k (just f without a bias).
template <int E, class D>
__device__ __forceinline__ void f_plus_bias(const D* f, const D* bias, int64_t k, float (&fb)[E]) {
  load<E>(f + k, fb);
  if (bias != nullptr) {
    float b[E];
    load<E>(bias + k, b);
#pragma unroll
    for (int e = 0; e < E; ++e) fb[e] = fb[e] + b[e];
  }
}

// NB: streams in registers (n <= NB), or 0: the generic path.
template <class D, int E, int NB>
__global__ void __launch_bounds__(kThreads) post_res_forward_kernel(Forward<D> a) {
  // Row i: H(i, 0 .. NB-1), zero-padded; then H_post[0 .. NB-1] at NB * NB.
  __shared__ float weights[kWarps][NB > 0 ? NB * (NB + 1) : 1];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= a.tokens) return;  // the whole warp
  const int n = a.n;
  const int64_t c = a.c;
  const D* xt = a.x + t * n * c;
  float* w = weights[warp];
  if constexpr (NB > 0) {
    for (int e = lane; e < NB * NB; e += 32) {
      const int i = e / NB, j = e % NB;
      w[e] = i < n && j < n ? a.h_res[mix_index(t, n, a.transposed, i, j)] : 0.0f;
    }
    for (int i = lane; i < NB; i += 32) w[NB * NB + i] = i < n ? a.h_post[t * n + i] : 0.0f;
    __syncwarp();
  }

  for (int64_t k = static_cast<int64_t>(lane) * E; k < c; k += 32 * E) {
    float fb[E];
    f_plus_bias<E>(a.f + t * c, a.bias, k, fb);
    if constexpr (NB > 0) {
      float xv[NB][E];
#pragma unroll
      for (int j = 0; j < NB; ++j)
        if (j < n) load<E>(xt + j * c + k, xv[j]);
#pragma unroll
      for (int i = 0; i < NB; ++i) {
        if (i >= n) break;
        // y_i = sum_j H(i, j) x_j + H_post[i] (f + bias), the mix first, stream 0 first.
        const float* wi = w + i * NB;
        float acc[E];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] = wi[0] * xv[0][e];
#pragma unroll
        for (int j = 1; j < NB; ++j) {
          if (j >= n) break;
#pragma unroll
          for (int e = 0; e < E; ++e) acc[e] += wi[j] * xv[j][e];
        }
        const float hp = w[NB * NB + i];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += hp * fb[e];
        store<E>(a.y + (t * n + i) * c + k, acc);
      }
    } else {
      for (int i = 0; i < n; ++i) {
        float acc[E], v[E];
        load<E>(xt + k, v);
        const float h0 = a.h_res[mix_index(t, n, a.transposed, i, 0)];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] = h0 * v[e];
        for (int j = 1; j < n; ++j) {
          load<E>(xt + j * c + k, v);
          const float hij = a.h_res[mix_index(t, n, a.transposed, i, j)];
#pragma unroll
          for (int e = 0; e < E; ++e) acc[e] += hij * v[e];
        }
        const float hp = a.h_post[t * n + i];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] += hp * fb[e];
        store<E>(a.y + (t * n + i) * c + k, acc);
      }
    }
  }
}

// ---- backward ----

template <class D>
struct Backward {
  const D* x;
  const float* h_res;
  const float* h_post;
  const D* f;
  const D* bias;
  const D* dy;
  D* dx;              // accumulated; each output nullptr when not wanted
  float* dh_res;      // written (nullptr on the generic path: row_dots does it)
  float* dh_post;     // written (likewise)
  D* df;              // written
  float* block_sums;  // [blocks, C]: per block, the sum of its tokens' df; nullptr: dbias not wanted
  int64_t tokens, c;
  int n;
  bool transposed;
};

template <class D, int E, int NB>
__global__ void __launch_bounds__(kThreads) post_res_backward_kernel(Backward<D> a) {
  constexpr int kDots = NB > 0 ? NB * NB + NB : 1;  // dH(i, j) at i * NB + j, dH_post[i] at NB * NB + i
  // Row j: H(0 .. NB-1, j) (H transposed), zero-padded; then H_post[0 .. NB-1] at NB * NB.
  __shared__ float weights[kWarps][NB > 0 ? NB * (NB + 1) : 1];
  __shared__ float scratch[kWarps][NB > 0 ? kWarpScratch : 1];
  __shared__ float df_tile[kWarps][32 * E];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool active = t < a.tokens;
  const bool bias_sum = a.block_sums != nullptr;  // the same for the whole block
  if (!active && !bias_sum) return;               // with dbias, every warp takes part in the block's sums
  const int n = a.n;
  const int64_t c = a.c;
  const int64_t tt = active ? t : 0;  // rows of an inactive warp are never read
  const D* xt = a.x + tt * n * c;
  const D* dyt = a.dy + tt * n * c;
  D* dxt = a.dx != nullptr ? a.dx + tt * n * c : nullptr;
  const float* hp = a.h_post + tt * n;
  const bool want_df = a.df != nullptr || bias_sum;
  const bool want_res = NB > 0 && a.dh_res != nullptr;
  const bool want_post = NB > 0 && a.dh_post != nullptr;
  float* w = weights[warp];
  if constexpr (NB > 0) {
    if (active) {
      for (int e = lane; e < NB * NB; e += 32) {
        const int j = e / NB, i = e % NB;
        w[e] = i < n && j < n ? a.h_res[mix_index(tt, n, a.transposed, i, j)] : 0.0f;
      }
      for (int i = lane; i < NB; i += 32) w[NB * NB + i] = i < n ? hp[i] : 0.0f;
    }
    __syncwarp();
  }
  float dots[kDots];
#pragma unroll
  for (int v = 0; v < kDots; ++v) dots[v] = 0.0f;

  for (int64_t k0 = 0; k0 < c; k0 += 32 * E) {
    const int64_t k = k0 + static_cast<int64_t>(lane) * E;
    float df[E];
#pragma unroll
    for (int e = 0; e < E; ++e) df[e] = 0.0f;
    if (active && k < c) {
      if constexpr (NB > 0) {
        float d[NB][E];
#pragma unroll
        for (int i = 0; i < NB; ++i)
          if (i < n) load<E>(dyt + i * c + k, d[i]);
        if (want_df) {  // df = sum_i H_post[i] dy_i
          const float* h = w + NB * NB;
#pragma unroll
          for (int e = 0; e < E; ++e) df[e] = h[0] * d[0][e];
#pragma unroll
          for (int i = 1; i < NB; ++i) {
            if (i >= n) break;
#pragma unroll
            for (int e = 0; e < E; ++e) df[e] += h[i] * d[i][e];
          }
          if (a.df != nullptr) store<E>(a.df + tt * c + k, df);
        }
        if (want_post) {  // dH_post[i] += <dy_i, f + bias>
          float fb[E];
          f_plus_bias<E>(a.f + tt * c, a.bias, k, fb);
#pragma unroll
          for (int i = 0; i < NB; ++i) {
            if (i >= n) break;
#pragma unroll
            for (int e = 0; e < E; ++e) dots[NB * NB + i] += d[i][e] * fb[e];
          }
        }
#pragma unroll
        for (int j = 0; j < NB; ++j) {
          if (j >= n) break;
          if (want_res) {  // dH(i, j) += <dy_i, x_j>
            float xv[E];
            load<E>(xt + j * c + k, xv);
#pragma unroll
            for (int i = 0; i < NB; ++i) {
              if (i >= n) break;
#pragma unroll
              for (int e = 0; e < E; ++e) dots[i * NB + j] += d[i][e] * xv[e];
            }
          }
          if (dxt != nullptr) {  // dx_j += sum_i H(i, j) dy_i, the sum formed first
            const float* hj = w + j * NB;
            float s[E], v[E];
#pragma unroll
            for (int e = 0; e < E; ++e) s[e] = hj[0] * d[0][e];
#pragma unroll
            for (int i = 1; i < NB; ++i) {
              if (i >= n) break;
#pragma unroll
              for (int e = 0; e < E; ++e) s[e] += hj[i] * d[i][e];
            }
            load<E>(dxt + j * c + k, v);
#pragma unroll
            for (int e = 0; e < E; ++e) v[e] += s[e];
            store<E>(dxt + j * c + k, v);
          }
        }
      } else {
        float v[E];
        if (want_df) {
          load<E>(dyt + k, v);
#pragma unroll
          for (int e = 0; e < E; ++e) df[e] = hp[0] * v[e];
          for (int i = 1; i < n; ++i) {
            load<E>(dyt + i * c + k, v);
#pragma unroll
            for (int e = 0; e < E; ++e) df[e] += hp[i] * v[e];
          }
          if (a.df != nullptr) store<E>(a.df + tt * c + k, df);
        }
        if (dxt != nullptr) {
          for (int j = 0; j < n; ++j) {
            float s[E];
            load<E>(dyt + k, v);
            const float h0 = a.h_res[mix_index(tt, n, a.transposed, 0, j)];
#pragma unroll
            for (int e = 0; e < E; ++e) s[e] = h0 * v[e];
            for (int i = 1; i < n; ++i) {
              load<E>(dyt + i * c + k, v);
              const float hij = a.h_res[mix_index(tt, n, a.transposed, i, j)];
#pragma unroll
              for (int e = 0; e < E; ++e) s[e] += hij * v[e];
            }
            load<E>(dxt + j * c + k, v);
#pragma unroll
            for (int e = 0; e < E; ++e) v[e] += s[e];
            store<E>(dxt + j * c + k, v);
          }
        }
      }
    }
    if (bias_sum) {  // this block's row of dbias partial sums: its 8 tokens' df, in warp order
#pragma unroll
      for (int e = 0; e < E; ++e) df_tile[warp][lane * E + e] = df[e];
      __syncthreads();
      for (int q = static_cast<int>(threadIdx.x); q < 32 * E; q += kThreads) {
        if (k0 + q >= c) continue;
        float s = df_tile[0][q];
        for (int v = 1; v < kWarps; ++v) s += df_tile[v][q];
        a.block_sums[static_cast<int64_t>(blockIdx.x) * c + k0 + q] = s;
      }
      __syncthreads();
    }
  }

  if constexpr (NB > 0) {
    if (active && (want_res || want_post))
      warp_sums<kDots>(dots, scratch[warp], [&](int v, double s) {
        if (v < NB * NB) {
          const int i = v / NB, j = v % NB;
          if (want_res && i < n && j < n)
            a.dh_res[mix_index(tt, n, a.transposed, i, j)] = static_cast<float>(s);
        } else {
          const int i = v - NB * NB;
          if (want_post && i < n) a.dh_post[tt * n + i] = static_cast<float>(s);
        }
      });
  }
}

// The generic path's dot products, over the backward's own arguments (dh_res and dh_post are
// cleared there so that the kernel leaves them to these): dH(i, j) = <dy_i, x_j>,
// d = (t * n + i) * n + j.
template <class D>
struct DHRes {
  Backward<D> a;
  float* dh_res;
  __device__ float term(int64_t d, int64_t k) const {
    const int64_t n = a.n, t = d / (n * n), i = d / n % n, j = d % n;
    return to_f32(a.dy[(t * n + i) * a.c + k]) * to_f32(a.x[(t * n + j) * a.c + k]);
  }
  __device__ void store(int64_t d, double s) const {
    const int64_t n = a.n;
    dh_res[mix_index(d / (n * n), n, a.transposed, d / n % n, d % n)] = static_cast<float>(s);
  }
};

// dH_post[i] = <dy_i, f + bias>, d = t * n + i.
template <class D>
struct DHPost {
  Backward<D> a;
  float* dh_post;
  __device__ float term(int64_t d, int64_t k) const {
    const int64_t t = d / a.n, c = a.c;
    const float fb = a.bias != nullptr ? to_f32(a.f[t * c + k]) + to_f32(a.bias[k]) : to_f32(a.f[t * c + k]);
    return to_f32(a.dy[d * c + k]) * fb;
  }
  __device__ void store(int64_t d, double s) const { dh_post[d] = static_cast<float>(s); }
};

}  // namespace

template <class A>
void CudaPrimitives<A>::post_res_forward(Handle& handle, const MhcProblem& pb,
                                         const plx_mhc_post_res_forward_args& a) {
  if (pb.tokens == 0) return;
  using D = device_t<A>;
  const Forward<D> args{dev(mhc_in<A>(a.x)),
                        mhc_in<float>(a.h_res),
                        mhc_in<float>(a.h_post),
                        dev(mhc_in<A>(a.f)),
                        dev(mhc_in_if<A>(a.bias)),
                        dev(mhc_out<A>(a.y)),
                        pb.tokens,
                        pb.hidden,
                        static_cast<int>(pb.streams),
                        pb.transposed_h_res};
  const bool vec = vectors_fit<D>(pb.hidden, {args.x, args.f, args.bias, args.y});
  const unsigned blocks = static_cast<unsigned>((pb.tokens + kWarps - 1) / kWarps);
  cudaStream_t stream = handle.stream();
  constexpr int V = kVector<D>;
  switch (stream_bucket(pb.streams)) {
    case 4:
      if (vec)
        post_res_forward_kernel<D, V, 4><<<blocks, kThreads, 0, stream>>>(args);
      else
        post_res_forward_kernel<D, 1, 4><<<blocks, kThreads, 0, stream>>>(args);
      break;
    case 8:
      if (vec)
        post_res_forward_kernel<D, V, 8><<<blocks, kThreads, 0, stream>>>(args);
      else
        post_res_forward_kernel<D, 1, 8><<<blocks, kThreads, 0, stream>>>(args);
      break;
    default:
      if (vec)
        post_res_forward_kernel<D, V, 0><<<blocks, kThreads, 0, stream>>>(args);
      else
        post_res_forward_kernel<D, 1, 0><<<blocks, kThreads, 0, stream>>>(args);
      break;
  }
  check_launch("mhc_fused post_res forward");
}

template <class A>
void CudaPrimitives<A>::post_res_backward(Handle& handle, const MhcProblem& pb,
                                          const plx_mhc_post_res_backward_args& a) {
  using D = device_t<A>;
  D* dbias = dev(mhc_out_if<A>(a.dbias));
  Backward<D> args{dev(mhc_in<A>(a.x)),
                   mhc_in<float>(a.h_res),
                   mhc_in<float>(a.h_post),
                   dev(mhc_in<A>(a.f)),
                   dev(mhc_in_if<A>(a.bias)),
                   dev(mhc_in<A>(a.dy)),
                   dev(mhc_out_if<A>(a.dx)),
                   mhc_out_if<float>(a.dh_res),
                   mhc_out_if<float>(a.dh_post),
                   dev(mhc_out_if<A>(a.df)),
                   nullptr,
                   pb.tokens,
                   pb.hidden,
                   static_cast<int>(pb.streams),
                   pb.transposed_h_res};
  if (pb.tokens == 0 || (args.dx == nullptr && args.dh_res == nullptr && args.dh_post == nullptr &&
                         args.df == nullptr && dbias == nullptr))
    return;
  const int64_t blocks = (pb.tokens + kWarps - 1) / kWarps;
  struct Temps {
    float* block_sums;
    double* partials;
  };
  const Temps t = cuda_kernels::carve_scratch(handle, [&](cuda_kernels::ScratchLayout& s) {
    return Temps{s.take<float>(dbias != nullptr ? blocks * pb.hidden : 0),
                 s.take<double>(dbias != nullptr ? column_partials(blocks, pb.hidden) : 0)};
  });
  args.block_sums = t.block_sums;
  cudaStream_t stream = handle.stream();
  const char* name = "mhc_fused post_res backward";
  const bool vec = vectors_fit<D>(pb.hidden, {args.x, args.f, args.bias, args.dy, args.dx, args.df});
  const unsigned grid = static_cast<unsigned>(blocks);
  constexpr int V = kVector<D>;
  constexpr int V8 = V > 4 ? 4 : V;  // n in (4, 8]: 8-byte bf16 vectors, so dy fits in registers
  const int bucket = stream_bucket(pb.streams);
  if (bucket == 4) {
    if (vec)
      post_res_backward_kernel<D, V, 4><<<grid, kThreads, 0, stream>>>(args);
    else
      post_res_backward_kernel<D, 1, 4><<<grid, kThreads, 0, stream>>>(args);
    check_launch(name);
  } else if (bucket == 8) {
    if (vec)
      post_res_backward_kernel<D, V8, 8><<<grid, kThreads, 0, stream>>>(args);
    else
      post_res_backward_kernel<D, 1, 8><<<grid, kThreads, 0, stream>>>(args);
    check_launch(name);
  } else {
    float* dh_res = args.dh_res;
    float* dh_post = args.dh_post;
    args.dh_res = args.dh_post = nullptr;
    if (args.dx != nullptr || args.df != nullptr || args.block_sums != nullptr) {
      if (vec)
        post_res_backward_kernel<D, V, 0><<<grid, kThreads, 0, stream>>>(args);
      else
        post_res_backward_kernel<D, 1, 0><<<grid, kThreads, 0, stream>>>(args);
      check_launch(name);
    }
    const int64_t n = pb.streams, c = pb.hidden;
    if (dh_res != nullptr)
      row_dots(stream, pb.tokens * n * n, c, DHRes<D>{args, dh_res}, "mhc_fused post_res backward: dH_res");
    if (dh_post != nullptr)
      row_dots(stream, pb.tokens * n, c, DHPost<D>{args, dh_post}, "mhc_fused post_res backward: dH_post");
  }
  if (dbias != nullptr)  // dbias += the blocks' sums, in block order
    column_sums_into(stream, t.block_sums, blocks, pb.hidden, t.partials, dbias,
                     "mhc_fused post_res backward: dbias");
}

PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, post_res, float, Handle&);
PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, post_res, bfloat16, Handle&);

}  // namespace plexus::mhc_fused::gpu

// aggregate on CUDA: the sublayer's input, u = sum_j H_pre[j] * x_j per token.
//
// One warp per token (8 per block of 256 threads); its lanes walk the token's C values in 16-byte
// vectors (4 floats or 8 bf16; scalars when C or an address does not allow it). Forward reads
// each element of x once and writes each element of u once (the n-term sum in float, stream 0
// first, as the CPU backend sums it). Backward reads x and du once and reads and writes dx once,
// forming dH_pre[j] = <du, x_j> in the same loop that adds H_pre[j] * du to dx_j: each lane keeps
// its partial dot products in registers (float) and the warp adds its lanes' in double at the end
// of the row, in lane order. n > 8: dx in the same way, dH_pre by one warp per (token, stream).
#include "common.cuh"
#include "primitives.hpp"

namespace plexus::mhc_fused::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

template <class D>
struct Forward {
  const D* x;
  const float* h_pre;
  D* u;
  int64_t tokens, c;
  int n;
};

template <class D, int E>
__global__ void __launch_bounds__(kThreads) aggregate_forward_kernel(Forward<D> a) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (t >= a.tokens) return;  // the whole warp
  const int64_t c = a.c;
  const D* xt = a.x + t * a.n * c;
  const float* h = a.h_pre + t * a.n;
  for (int64_t k = static_cast<int64_t>(lane) * E; k < c; k += 32 * E) {
    float acc[E], v[E];
    load<E>(xt + k, v);
    const float h0 = h[0];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = h0 * v[e];
#pragma unroll 4
    for (int j = 1; j < a.n; ++j) {
      load<E>(xt + j * c + k, v);
      const float hj = h[j];
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] += hj * v[e];
    }
    store<E>(a.u + t * c + k, acc);
  }
}

template <class D>
struct Backward {
  const D* x;
  const float* h_pre;
  const D* du;
  D* dx;          // accumulated; nullptr: not wanted
  float* dh_pre;  // written; nullptr: not wanted (always so on the generic path: row_dots does it)
  int64_t tokens, c;
  int n;
};

// NB: streams in registers (n <= NB), or 0: the generic path (dx only).
template <class D, int E, int NB>
__global__ void __launch_bounds__(kThreads) aggregate_backward_kernel(Backward<D> a) {
  __shared__ float scratch[kWarps][NB > 0 ? kWarpScratch : 1];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= a.tokens) return;  // the whole warp
  const int n = a.n;
  const int64_t c = a.c;
  const float* h = a.h_pre + t * n;
  const D* g = a.du + t * c;
  const D* xt = a.x + t * n * c;
  D* dxt = a.dx != nullptr ? a.dx + t * n * c : nullptr;
  const bool dots_wanted = NB > 0 && a.dh_pre != nullptr;
  float dots[NB > 0 ? NB : 1];
#pragma unroll
  for (int j = 0; j < (NB > 0 ? NB : 1); ++j) dots[j] = 0.0f;

  for (int64_t k = static_cast<int64_t>(lane) * E; k < c; k += 32 * E) {
    float du[E];
    load<E>(g + k, du);
    if constexpr (NB > 0) {
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        if (j >= n) break;
        if (dxt != nullptr) {  // dx_j += H_pre[j] du
          float v[E];
          load<E>(dxt + j * c + k, v);
          const float hj = h[j];
#pragma unroll
          for (int e = 0; e < E; ++e) v[e] += hj * du[e];
          store<E>(dxt + j * c + k, v);
        }
        if (dots_wanted) {  // dH_pre[j] += <du, x_j> over this lane's values
          float v[E];
          load<E>(xt + j * c + k, v);
#pragma unroll
          for (int e = 0; e < E; ++e) dots[j] += du[e] * v[e];
        }
      }
    } else {
      for (int j = 0; j < n; ++j) {
        float v[E];
        load<E>(dxt + j * c + k, v);
        const float hj = h[j];
#pragma unroll
        for (int e = 0; e < E; ++e) v[e] += hj * du[e];
        store<E>(dxt + j * c + k, v);
      }
    }
  }
  if constexpr (NB > 0) {
    if (dots_wanted)
      warp_sums<NB>(dots, scratch[warp], [&](int j, double s) {
        if (j < n) a.dh_pre[t * n + j] = static_cast<float>(s);
      });
  }
}

// dH_pre[t, j] = <du[t], x[t, j]>, d = t * n + j (the generic path).
template <class D>
struct DHPre {
  const D* du;
  const D* x;
  int64_t n, c;
  float* dh_pre;
  __device__ float term(int64_t d, int64_t k) const {
    return to_f32(du[d / n * c + k]) * to_f32(x[d * c + k]);
  }
  __device__ void store(int64_t d, double s) const { dh_pre[d] = static_cast<float>(s); }
};

}  // namespace

template <class A>
void CudaPrimitives<A>::aggregate_forward(Handle& handle, const MhcProblem& pb,
                                          const plx_mhc_aggregate_forward_args& a) {
  if (pb.tokens == 0) return;
  using D = device_t<A>;
  const Forward<D> args{dev(mhc_in<A>(a.x)), mhc_in<float>(a.h_pre),      dev(mhc_out<A>(a.u)), pb.tokens,
                        pb.hidden,           static_cast<int>(pb.streams)};
  const unsigned blocks = static_cast<unsigned>((pb.tokens + kWarps - 1) / kWarps);
  if (vectors_fit<D>(pb.hidden, {args.x, args.u}))
    aggregate_forward_kernel<D, kVector<D>><<<blocks, kThreads, 0, handle.stream()>>>(args);
  else
    aggregate_forward_kernel<D, 1><<<blocks, kThreads, 0, handle.stream()>>>(args);
  check_launch("mhc_fused aggregate forward");
}

template <class A>
void CudaPrimitives<A>::aggregate_backward(Handle& handle, const MhcProblem& pb,
                                           const plx_mhc_aggregate_backward_args& a) {
  using D = device_t<A>;
  Backward<D> args{dev(mhc_in<A>(a.x)),
                   mhc_in<float>(a.h_pre),
                   dev(mhc_in<A>(a.du)),
                   dev(mhc_out_if<A>(a.dx)),
                   mhc_out_if<float>(a.dh_pre),
                   pb.tokens,
                   pb.hidden,
                   static_cast<int>(pb.streams)};
  if (pb.tokens == 0 || (args.dx == nullptr && args.dh_pre == nullptr)) return;
  cudaStream_t stream = handle.stream();
  const unsigned blocks = static_cast<unsigned>((pb.tokens + kWarps - 1) / kWarps);
  const bool vec = vectors_fit<D>(pb.hidden, {args.x, args.du, args.dx});
  const char* name = "mhc_fused aggregate backward";
  switch (stream_bucket(pb.streams)) {
    case 4:
      if (vec)
        aggregate_backward_kernel<D, kVector<D>, 4><<<blocks, kThreads, 0, stream>>>(args);
      else
        aggregate_backward_kernel<D, 1, 4><<<blocks, kThreads, 0, stream>>>(args);
      check_launch(name);
      break;
    case 8:
      if (vec)
        aggregate_backward_kernel<D, kVector<D>, 8><<<blocks, kThreads, 0, stream>>>(args);
      else
        aggregate_backward_kernel<D, 1, 8><<<blocks, kThreads, 0, stream>>>(args);
      check_launch(name);
      break;
    default: {
      float* dh_pre = args.dh_pre;
      args.dh_pre = nullptr;
      if (args.dx != nullptr) {
        if (vec)
          aggregate_backward_kernel<D, kVector<D>, 0><<<blocks, kThreads, 0, stream>>>(args);
        else
          aggregate_backward_kernel<D, 1, 0><<<blocks, kThreads, 0, stream>>>(args);
        check_launch(name);
      }
      if (dh_pre != nullptr)
        row_dots(stream, pb.tokens * pb.streams, pb.hidden,
                 DHPre<D>{args.du, args.x, pb.streams, pb.hidden, dh_pre},
                 "mhc_fused aggregate backward: dH_pre");
      break;
    }
  }
}

PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, aggregate, float, Handle&);
PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, aggregate, bfloat16, Handle&);

}  // namespace plexus::mhc_fused::gpu

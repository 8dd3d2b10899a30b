// aggregate on CUDA, pass for pass as ../aggregate.cpp: the sublayer's input,
//   u = sum_j H_pre[j] * x_j   per token.
// Forward is n eager multiply-add passes over u; backward one pass per gradient.
#include "passes.cuh"
#include "primitives.hpp"

namespace plexus::mhc_native::gpu {
namespace {

struct AddStream {  // u[t, k] += H_pre[t, j] * x[t, j, k] for one stream j
  const float* x;
  const float* h_pre;
  int64_t n, c, j;
  float* u;
  __device__ void operator()(int64_t i) const {
    const int64_t t = i / c, k = i % c;
    u[i] += h_pre[t * n + j] * x[(t * n + j) * c + k];
  }
};

struct DHPre {  // dH_pre[t, j] = <du[t], x[t, j]>, row = t * n + j
  const float* du;
  const float* x;
  int64_t n, c;
  float* dh_pre;
  __device__ double term(int64_t row, int64_t k) const {
    return static_cast<double>(du[row / n * c + k]) * x[row * c + k];
  }
  __device__ void store(int64_t row, double sum) const { dh_pre[row] = static_cast<float>(sum); }
};

struct DX {  // dx[t, j, k] += H_pre[t, j] * du[t, k]
  const float* h_pre;
  const float* du;
  int64_t n, c;
  float* dx;
  __device__ void operator()(int64_t i) const {
    const int64_t row = i / c, k = i % c;  // row = t * n + j
    dx[i] += h_pre[row] * du[row / n * c + k];
  }
};

}  // namespace

template <class A>
void CudaPrimitives<A>::aggregate_forward(Handle& handle, const MhcProblem& pb,
                                          const plx_mhc_aggregate_forward_args& a) {
  const int64_t count = pb.tokens * pb.hidden;
  if (count == 0) return;
  cudaStream_t stream = handle.stream();
  float* u = mhc_out<float>(a.u);
  PLEXUS_CUDA_CHECK(cudaMemsetAsync(u, 0, static_cast<std::size_t>(count) * sizeof(float), stream),
                    "mhc_native aggregate: u = 0");
  for (int64_t j = 0; j < pb.streams; ++j)
    for_each(stream, count,
             AddStream{mhc_in<float>(a.x), mhc_in<float>(a.h_pre), pb.streams, pb.hidden, j, u},
             "mhc_native aggregate: u += H_pre x");
}

template <class A>
void CudaPrimitives<A>::aggregate_backward(Handle& handle, const MhcProblem& pb,
                                           const plx_mhc_aggregate_backward_args& a) {
  if (pb.tokens == 0) return;
  cudaStream_t stream = handle.stream();
  const float* x = mhc_in<float>(a.x);
  const float* du = mhc_in<float>(a.du);
  if (float* dh_pre = mhc_out_if<float>(a.dh_pre))
    row_sums(stream, pb.tokens * pb.streams, pb.hidden, DHPre{du, x, pb.streams, pb.hidden, dh_pre},
             "mhc_native aggregate': dH_pre");
  if (float* dx = mhc_out_if<float>(a.dx))
    for_each(stream, pb.tokens * pb.streams * pb.hidden,
             DX{mhc_in<float>(a.h_pre), du, pb.streams, pb.hidden, dx}, "mhc_native aggregate': dx");
}

PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, aggregate, float, Handle&);

}  // namespace plexus::mhc_native::gpu

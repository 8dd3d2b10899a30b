// post_res on CUDA, pass for pass as ../post_res.cpp: the new residual streams, per token and
// stream i,
//   y_i = sum_j H(i, j) * x_j + H_post[i] * (f + bias)
// with H(i, j) = H_res[i][j], or H_res[j][i] under PLX_MHC_TRANSPOSED_H_RES. Eager passes: the
// stream mix, f + bias, then the H_post-weighted add; backward one pass per gradient.
#include "passes.cuh"
#include "plexus_cuda_kernels/scratch_layout.hpp"
#include "primitives.hpp"

namespace plexus::mhc_native::gpu {
namespace {

// The mixing matrix H(i, j) of token t, in either orientation, and where dH(i, j) is stored.
struct Mix {
  const float* h_res;
  int64_t n;
  bool transposed;
  __device__ int64_t at(int64_t t, int64_t i, int64_t j) const {
    return transposed ? (t * n + j) * n + i : (t * n + i) * n + j;
  }
  __device__ float operator()(int64_t t, int64_t i, int64_t j) const { return h_res[at(t, i, j)]; }
};

struct MixStreams {  // y[t, i, k] = sum_j H(i, j) x[t, j, k], in double
  Mix mix;
  const float* x;
  int64_t n, c;
  float* y;
  __device__ void operator()(int64_t e) const {
    const int64_t t = e / (n * c), i = e / c % n, k = e % c;
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += static_cast<double>(mix(t, i, j)) * x[(t * n + j) * c + k];
    y[e] = static_cast<float>(s);
  }
};

struct FPlusBias {
  const float* f;
  const float* bias;
  int64_t c;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = f[i] + bias[i % c]; }
};

struct AddPost {  // y[t, i, k] += H_post[t, i] * (f + bias)[t, k]
  const float* h_post;
  const float* fb;
  int64_t n, c;
  float* y;
  __device__ void operator()(int64_t e) const { y[e] += h_post[e / c] * fb[e / (n * c) * c + e % c]; }
};

struct DX {  // dx[t, j, k] += sum_i H(i, j) dy[t, i, k], in double
  Mix mix;
  const float* dy;
  int64_t n, c;
  float* dx;
  __device__ void operator()(int64_t e) const {
    const int64_t t = e / (n * c), j = e / c % n, k = e % c;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(mix(t, i, j)) * dy[(t * n + i) * c + k];
    dx[e] += static_cast<float>(s);
  }
};

struct DHRes {  // dH(i, j) = <dy[t, i], x[t, j]>, row = (t * n + i) * n + j, stored where H(i, j) is read
  Mix mix;
  const float* dy;
  const float* x;
  int64_t n, c;
  float* dh_res;
  __device__ double term(int64_t row, int64_t k) const {
    const int64_t t = row / (n * n), i = row / n % n, j = row % n;
    return static_cast<double>(dy[(t * n + i) * c + k]) * x[(t * n + j) * c + k];
  }
  __device__ void store(int64_t row, double sum) const {
    dh_res[mix.at(row / (n * n), row / n % n, row % n)] = static_cast<float>(sum);
  }
};

struct DHPost {  // dH_post[t, i] = <dy[t, i], (f + bias)[t]>, row = t * n + i
  const float* dy;
  const float* fb;
  int64_t n, c;
  float* dh_post;
  __device__ double term(int64_t row, int64_t k) const {
    return static_cast<double>(dy[row * c + k]) * fb[row / n * c + k];
  }
  __device__ void store(int64_t row, double sum) const { dh_post[row] = static_cast<float>(sum); }
};

struct DF {  // df[t, k] = sum_i H_post[t, i] dy[t, i, k], in double
  const float* h_post;
  const float* dy;
  int64_t n, c;
  float* df;
  __device__ void operator()(int64_t e) const {
    const int64_t t = e / c, k = e % c;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(h_post[t * n + i]) * dy[(t * n + i) * c + k];
    df[e] = static_cast<float>(s);
  }
};

// f + bias into `storage` ([T, C]); just f when F has no output bias.
const float* f_plus_bias(cudaStream_t stream, const float* f, const float* bias, int64_t tokens, int64_t c,
                         float* storage) {
  if (bias == nullptr) return f;
  for_each(stream, tokens * c, FPlusBias{f, bias, c, storage}, "mhc_native post_res: f + bias");
  return storage;
}

}  // namespace

template <class A>
void CudaPrimitives<A>::post_res_forward(Handle& handle, const MhcProblem& pb,
                                         const plx_mhc_post_res_forward_args& a) {
  if (pb.tokens == 0) return;
  const int64_t n = pb.streams, c = pb.hidden;
  const float* bias = mhc_in_if<float>(a.bias);
  float* y = mhc_out<float>(a.y);
  const Mix mix{mhc_in<float>(a.h_res), n, pb.transposed_h_res};
  float* storage = cuda_kernels::carve_scratch(handle, [&](cuda_kernels::ScratchLayout& w) {
    return w.take<float>(bias != nullptr ? pb.tokens * c : 0);
  });
  cudaStream_t stream = handle.stream();

  for_each(stream, pb.tokens * n * c, MixStreams{mix, mhc_in<float>(a.x), n, c, y},
           "mhc_native post_res: mix");
  const float* fb = f_plus_bias(stream, mhc_in<float>(a.f), bias, pb.tokens, c, storage);
  for_each(stream, pb.tokens * n * c, AddPost{mhc_in<float>(a.h_post), fb, n, c, y},
           "mhc_native post_res: + H_post f");
}

template <class A>
void CudaPrimitives<A>::post_res_backward(Handle& handle, const MhcProblem& pb,
                                          const plx_mhc_post_res_backward_args& a) {
  if (pb.tokens == 0) return;
  const int64_t n = pb.streams, c = pb.hidden;
  const float* x = mhc_in<float>(a.x);
  const float* h_post = mhc_in<float>(a.h_post);
  const float* dy = mhc_in<float>(a.dy);
  const float* bias = mhc_in_if<float>(a.bias);
  const Mix mix{mhc_in<float>(a.h_res), n, pb.transposed_h_res};
  float* dx = mhc_out_if<float>(a.dx);
  float* dh_res = mhc_out_if<float>(a.dh_res);
  float* dh_post = mhc_out_if<float>(a.dh_post);
  float* df = mhc_out_if<float>(a.df);
  float* dbias = mhc_out_if<float>(a.dbias);

  struct Temps {
    float* fb;        // [T, C] f + bias, when dH_post is wanted and F has a bias
    float* df;        // [T, C] df, when only dbias wants it
    double* partials; // dbias's sums over tokens
  };
  const Temps t = cuda_kernels::carve_scratch(handle, [&](cuda_kernels::ScratchLayout& w) {
    Temps temps{};
    temps.fb = w.take<float>(dh_post != nullptr && bias != nullptr ? pb.tokens * c : 0);
    temps.df = w.take<float>(df == nullptr && dbias != nullptr ? pb.tokens * c : 0);
    temps.partials = w.take<double>(dbias != nullptr ? column_partials(pb.tokens, c) : 0);
    return temps;
  });
  cudaStream_t stream = handle.stream();

  if (dx != nullptr) for_each(stream, pb.tokens * n * c, DX{mix, dy, n, c, dx}, "mhc_native post_res': dx");
  if (dh_res != nullptr)
    row_sums(stream, pb.tokens * n * n, c, DHRes{mix, dy, x, n, c, dh_res}, "mhc_native post_res': dH_res");
  if (dh_post != nullptr) {
    const float* fb = f_plus_bias(stream, mhc_in<float>(a.f), bias, pb.tokens, c, t.fb);
    row_sums(stream, pb.tokens * n, c, DHPost{dy, fb, n, c, dh_post}, "mhc_native post_res': dH_post");
  }

  // df; dbias needs it too, so it goes to a temporary when df itself is not wanted.
  if (df == nullptr && dbias == nullptr) return;
  if (df == nullptr) df = t.df;
  for_each(stream, pb.tokens * c, DF{h_post, dy, n, c, df}, "mhc_native post_res': df");
  if (dbias != nullptr)  // dbias += sum_t df[t]
    column_sums_into(stream, df, pb.tokens, c, t.partials, dbias, "mhc_native post_res': dbias");
}

PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, post_res, float, Handle&);

}  // namespace plexus::mhc_native::gpu

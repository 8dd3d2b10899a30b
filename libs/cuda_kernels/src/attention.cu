// Causal grouped-query attention on the GPU: per head, cuBLAS strided-batched products over the
// batch and two row kernels (the masked softmax forward, dS = P * (dP - rowsum(dO * O)) backward).
#include <type_traits>

#include "device_common.cuh"
#include "plexus_cuda_kernels/attention.hpp"
#include "plexus_cuda_kernels/gemm.hpp"

namespace plexus::cuda_kernels {
namespace {

using namespace detail;

// Row s of batch b (block b * S + s): probs[0..s] = softmax(scores[0..s]), zeros after. scores are
// fp32 and may be the same memory as probs (fp32): each element is read and then written by one
// thread, after both reductions.
template <class D>
__global__ void causal_softmax_kernel(int64_t seq, const float* scores, int64_t scores_batch_stride, D* probs,
                                      int64_t probs_batch_stride) {
  const int64_t b = blockIdx.x / seq, s = blockIdx.x % seq;
  const float* in = scores + b * scores_batch_stride + s * seq;
  D* out = probs + b * probs_batch_stride + s * seq;
  const int64_t n = s + 1;
  float mx = -INFINITY;
  for (int64_t t = threadIdx.x; t < n; t += blockDim.x) mx = fmaxf(mx, in[t]);
  mx = block_max(mx);
  float sum = 0.0f;
  for (int64_t t = threadIdx.x; t < n; t += blockDim.x) sum += exp_clamped(in[t] - mx);
  const float inv = 1.0f / block_sum(sum);
  for (int64_t t = threadIdx.x; t < seq; t += blockDim.x)
    out[t] = from_f32<D>(t < n ? exp_clamped(in[t] - mx) * inv : 0.0f);
}

// Row i of batch b: ds[t] = p[t] * (dp[t] - dot) for t <= i, 0 after, dot = sum_d o[d] * do[d].
// dp is fp32 [batch, S, S] and may be the same memory as ds (fp32), as above.
template <class D>
__global__ void attention_dscores_kernel(int64_t seq, int64_t head_dim, const D* out, const D* dout,
                                         int64_t o_ld, const D* probs, int64_t probs_batch_stride,
                                         const float* dp, D* ds) {
  const int64_t b = blockIdx.x / seq, i = blockIdx.x % seq;
  const int64_t token = b * seq + i;
  const D* o = out + token * o_ld;
  const D* g = dout + token * o_ld;
  float dot = 0.0f;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) dot += to_f32(o[d]) * to_f32(g[d]);
  dot = block_sum(dot);
  const D* p = probs + b * probs_batch_stride + i * seq;
  const float* dpr = dp + token * seq;
  D* dsr = ds + token * seq;
  for (int64_t t = threadIdx.x; t < seq; t += blockDim.x)
    dsr[t] = from_f32<D>(t <= i ? to_f32(p[t]) * (dpr[t] - dot) : 0.0f);
}

// dst[r * ld + c] = src[r * cols + c]: an fp32 accumulator into its columns of dqkv.
template <class D>
__global__ void store_columns_kernel(int64_t rows, int64_t cols, const float* src, D* dst, int64_t ld) {
  for (int64_t i = global_thread(); i < rows * cols; i += grid_threads())
    dst[(i / cols) * ld + i % cols] = from_f32<D>(src[i]);
}

template <class T>
constexpr bool kIsFloat = std::is_same_v<T, float>;

}  // namespace

template <class T>
void attention_forward(Handle& handle, const AttentionLayout& l, const T* qkv, T* out, T* probs) {
  constexpr const char* kName = "attention_forward";
  l.validate();
  const int64_t B = l.batch, S = l.seq, H = l.heads, hd = l.head_dim, ld = l.ld, per = l.heads / l.groups;
  if (B == 0 || S == 0) return;
  const int64_t ldo = H * hd;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));  // as the CPU: in fp32
  cudaStream_t stream = handle.stream();

  // fp32 with kept probabilities: the scores are written into the probabilities and normalized in
  // place. Otherwise fp32 scores in scratch, and (no probabilities kept) one head's probabilities.
  const bool in_place = kIsFloat<T> && probs != nullptr;
  const auto square = static_cast<std::size_t>(B * S * S);
  Carve sizes;
  sizes.take<float>(in_place ? 0 : square);
  sizes.take<T>(probs == nullptr ? square : 0);
  Carve carve(handle.scratch(sizes.bytes()));
  float* scores_scratch = carve.take<float>(in_place ? 0 : square);
  T* probs_scratch = carve.take<T>(probs == nullptr ? square : 0);

  const unsigned rows = row_blocks(B * S, kName);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / per;
    T* p = probs != nullptr ? probs + h * S * S : probs_scratch;
    const int64_t p_stride = probs != nullptr ? H * S * S : S * S;
    float* scores = scores_scratch;
    int64_t scores_stride = S * S;
    if constexpr (kIsFloat<T>) {
      if (in_place) {
        scores = p;
        scores_stride = p_stride;
      }
    }
    // S = scale * Q_h K_g^T, all S x S (the masked part is computed and ignored).
    gemm_strided_batched<T, float>(handle, Trans::N, Trans::T, S, S, hd, scale, qkv + l.q_column(h), ld,
                                   S * ld, qkv + l.k_column(g), ld, S * ld, 0.0f, scores, S, scores_stride,
                                   B);
    causal_softmax_kernel<<<rows, row_threads(S), 0, stream>>>(S, scores, scores_stride, dev(p), p_stride);
    check_launch(kName);
    // O_h = P V_g.
    gemm_strided_batched<T, T>(handle, Trans::N, Trans::N, S, hd, S, 1.0f, p, S, p_stride,
                               qkv + l.v_column(g), ld, S * ld, 0.0f, out + h * hd, ldo, S * ldo, B);
  }
}

template <class T>
void attention_backward(Handle& handle, const AttentionLayout& l, const T* qkv, const T* probs, const T* out,
                        const T* dout, T* dqkv) {
  constexpr const char* kName = "attention_backward";
  l.validate();
  if (probs == nullptr)
    throw std::invalid_argument("attention_backward: needs the probabilities kept by attention_forward");
  const int64_t B = l.batch, S = l.seq, H = l.heads, hd = l.head_dim, ld = l.ld, per = l.heads / l.groups;
  if (B == 0 || S == 0) return;
  const int64_t ldo = H * hd;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  cudaStream_t stream = handle.stream();

  // fp32 scratch for dP (fp32: dS is written over it); bf16 also needs dS rounded to bf16 (an
  // input of the next products) and fp32 accumulators for the group's key and value gradients.
  const auto square = static_cast<std::size_t>(B * S * S);
  const auto kv = static_cast<std::size_t>(B * S * hd);
  Carve sizes;
  sizes.take<float>(square);
  sizes.take<T>(kIsFloat<T> ? 0 : square);
  sizes.take<float>(kIsFloat<T> ? 0 : kv);
  sizes.take<float>(kIsFloat<T> ? 0 : kv);
  Carve carve(handle.scratch(sizes.bytes()));
  float* dp = carve.take<float>(square);
  T* ds_scratch = carve.take<T>(kIsFloat<T> ? 0 : square);
  float* dk_acc = carve.take<float>(kIsFloat<T> ? 0 : kv);
  float* dv_acc = carve.take<float>(kIsFloat<T> ? 0 : kv);

  T* ds;
  if constexpr (kIsFloat<T>)
    ds = dp;
  else
    ds = ds_scratch;

  const unsigned rows = row_blocks(B * S, kName);
  for (int64_t g = 0; g < l.groups; ++g) {
    for (int64_t j = 0; j < per; ++j) {
      const int64_t h = g * per + j;
      const T* q = qkv + l.q_column(h);
      const T* k = qkv + l.k_column(g);
      const T* v = qkv + l.v_column(g);
      const T* p = probs + h * S * S;
      const int64_t p_stride = H * S * S;
      const T* dout_h = dout + h * hd;
      // dP = dO_h V_g^T (fp32).
      gemm_strided_batched<T, float>(handle, Trans::N, Trans::T, S, S, hd, 1.0f, dout_h, ldo, S * ldo, v, ld,
                                     S * ld, 0.0f, dp, S, S * S, B);
      // dS = P * (dP - rowsum(dO * O)), zero where masked.
      attention_dscores_kernel<<<rows, row_threads(std::max(S, hd)), 0, stream>>>(
          S, hd, dev(out + h * hd), dev(dout_h), ldo, dev(p), p_stride, dp, dev(ds));
      check_launch(kName);
      // dQ_h = scale dS K_g (written).
      gemm_strided_batched<T, T>(handle, Trans::N, Trans::N, S, hd, S, scale, ds, S, S * S, k, ld, S * ld,
                                 0.0f, dqkv + l.q_column(h), ld, S * ld, B);
      // dK_g += scale dS^T Q_h, dV_g += P_h^T dO_h: the group's first head writes, the others add.
      const float beta = j == 0 ? 0.0f : 1.0f;
      if constexpr (kIsFloat<T>) {
        gemm_strided_batched<T, float>(handle, Trans::T, Trans::N, S, hd, S, scale, ds, S, S * S, q, ld,
                                       S * ld, beta, dqkv + l.k_column(g), ld, S * ld, B);
        gemm_strided_batched<T, float>(handle, Trans::T, Trans::N, S, hd, S, 1.0f, p, S, p_stride, dout_h,
                                       ldo, S * ldo, beta, dqkv + l.v_column(g), ld, S * ld, B);
      } else {
        gemm_strided_batched<T, float>(handle, Trans::T, Trans::N, S, hd, S, scale, ds, S, S * S, q, ld,
                                       S * ld, beta, dk_acc, hd, S * hd, B);
        gemm_strided_batched<T, float>(handle, Trans::T, Trans::N, S, hd, S, 1.0f, p, S, p_stride, dout_h,
                                       ldo, S * ldo, beta, dv_acc, hd, S * hd, B);
      }
    }
    if constexpr (!kIsFloat<T>) {
      const int64_t n = B * S * hd;
      store_columns_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
          B * S, hd, dk_acc, dev(dqkv + l.k_column(g)), ld);
      check_launch(kName);
      store_columns_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
          B * S, hd, dv_acc, dev(dqkv + l.v_column(g)), ld);
      check_launch(kName);
    }
  }
}

template void attention_forward<float>(Handle&, const AttentionLayout&, const float*, float*, float*);
template void attention_forward<bfloat16>(Handle&, const AttentionLayout&, const bfloat16*, bfloat16*,
                                          bfloat16*);
template void attention_backward<float>(Handle&, const AttentionLayout&, const float*, const float*,
                                        const float*, const float*, float*);
template void attention_backward<bfloat16>(Handle&, const AttentionLayout&, const bfloat16*, const bfloat16*,
                                           const bfloat16*, const bfloat16*, bfloat16*);

}  // namespace plexus::cuda_kernels

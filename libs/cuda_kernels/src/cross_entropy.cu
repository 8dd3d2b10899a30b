// Softmax cross-entropy on the GPU: one block per row (max, sum of exponentials, loss and
// optionally the softmax gradient), then one block adding the rows' losses in a fixed order.
#include "device_common.cuh"
#include "plexus_cuda_kernels/cross_entropy.hpp"

namespace plexus::cuda_kernels {
namespace {

using namespace detail;

constexpr int kFinishThreads = 1024;

// The row's maximum and sum of exp(x - max), every thread receiving both.
template <class D>
__device__ void row_softmax_stats(const D* row, int64_t vocab, float& mx, float& sum) {
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) m = fmaxf(m, to_f32(row[v]));
  mx = block_max(m);
  float s = 0.0f;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) s += exp_clamped(to_f32(row[v]) - mx);
  sum = block_sum(s);
}

template <class D>
__global__ void cross_entropy_rows_kernel(int64_t vocab, const D* logits, const int32_t* targets,
                                          int32_t ignore, double* row_loss, D* grad) {
  const int64_t r = blockIdx.x;
  const D* row = logits + r * vocab;
  D* grow = grad != nullptr ? grad + r * vocab : nullptr;
  const int32_t target = targets[r];
  if (target == ignore) {  // the same for the whole block: no thread is left waiting at a barrier
    if (grow != nullptr)
      for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) grow[v] = from_f32<D>(0.0f);
    if (threadIdx.x == 0) row_loss[r] = 0.0;
    return;
  }
  float mx, sum;
  row_softmax_stats(row, vocab, mx, sum);
  if (threadIdx.x == 0) {
    const bool valid = target >= 0 && target < vocab;
    const float lse = mx + logf(sum);
    row_loss[r] = valid ? static_cast<double>(lse - to_f32(row[target])) : static_cast<double>(NAN);
  }
  if (grow != nullptr) {
    const float inv = 1.0f / sum;
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      float p = exp_clamped(to_f32(row[v]) - mx) * inv;
      if (v == target) p -= 1.0f;
      grow[v] = from_f32<D>(p);
    }
  }
}

// One block: the sum of the rows' losses (double) and the count, in an order fixed by the row
// count alone.
__global__ void cross_entropy_finish_kernel(int64_t rows, const double* row_loss, const int32_t* targets,
                                            int32_t ignore, double* loss_sum, int64_t* count,
                                            float* loss_mean) {
  double s = 0.0;
  long long c = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    s += row_loss[r];
    c += targets[r] != ignore ? 1 : 0;
  }
  s = block_sum(s);
  c = block_sum(c);
  if (threadIdx.x == 0) {
    if (loss_sum != nullptr) *loss_sum = s;
    if (count != nullptr) *count = static_cast<int64_t>(c);
    if (loss_mean != nullptr) *loss_mean = c > 0 ? static_cast<float>(s / static_cast<double>(c)) : 0.0f;
  }
}

template <class D>
__global__ void cross_entropy_backward_kernel(int64_t vocab, const D* logits, const int32_t* targets,
                                              int32_t ignore, const float* dloss, const int64_t* count,
                                              D* dlogits) {
  const int64_t r = blockIdx.x;
  const D* row = logits + r * vocab;
  D* drow = dlogits + r * vocab;
  const int32_t target = targets[r];
  const int64_t n = *count;
  if (target == ignore || n == 0) {
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) drow[v] = from_f32<D>(0.0f);
    return;
  }
  // As the CPU head: the scale dL/dloss / count formed in double, rounded to fp32.
  const auto scale = static_cast<float>(static_cast<double>(*dloss) / static_cast<double>(n));
  float mx, sum;
  row_softmax_stats(row, vocab, mx, sum);
  const bool valid = target >= 0 && target < vocab;
  const float inv = 1.0f / sum;
  // Each element is read and written by the same thread after both reductions: dlogits may alias
  // logits.
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    float p = exp_clamped(to_f32(row[v]) - mx) * inv;
    if (v == target) p -= 1.0f;
    drow[v] = from_f32<D>(valid ? scale * p : NAN);
  }
}

}  // namespace

template <class T>
void cross_entropy_forward(Handle& handle, int64_t rows, int64_t vocab, const T* logits,
                           const int32_t* targets, int32_t ignore, CrossEntropyOutputs outputs, T* grad) {
  constexpr const char* kName = "cross_entropy_forward";
  cudaStream_t stream = handle.stream();
  auto* row_loss = static_cast<double*>(handle.scratch(static_cast<std::size_t>(rows) * sizeof(double)));
  if (rows > 0) {
    cross_entropy_rows_kernel<<<row_blocks(rows, kName), row_threads(vocab), 0, stream>>>(
        vocab, dev(logits), targets, ignore, row_loss, dev(grad));
    check_launch(kName);
  }
  cross_entropy_finish_kernel<<<1, kFinishThreads, 0, stream>>>(
      rows, row_loss, targets, ignore, outputs.loss_sum, outputs.count, outputs.loss_mean);
  check_launch(kName);
}

template <class T>
void cross_entropy_backward(int64_t rows, int64_t vocab, const T* logits, const int32_t* targets,
                            int32_t ignore, const float* dloss, const int64_t* count, T* dlogits,
                            cudaStream_t stream) {
  constexpr const char* kName = "cross_entropy_backward";
  if (rows == 0) return;
  cross_entropy_backward_kernel<<<row_blocks(rows, kName), row_threads(vocab), 0, stream>>>(
      vocab, dev(logits), targets, ignore, dloss, count, dev(dlogits));
  check_launch(kName);
}

#define PLEXUS_CUDA_KERNELS_CROSS_ENTROPY(T)                                                                 \
  template void cross_entropy_forward<T>(Handle&, int64_t, int64_t, const T*, const int32_t*, int32_t,       \
                                         CrossEntropyOutputs, T*);                                           \
  template void cross_entropy_backward<T>(int64_t, int64_t, const T*, const int32_t*, int32_t, const float*, \
                                          const int64_t*, T*, cudaStream_t);
PLEXUS_CUDA_KERNELS_CROSS_ENTROPY(float)
PLEXUS_CUDA_KERNELS_CROSS_ENTROPY(bfloat16)
#undef PLEXUS_CUDA_KERNELS_CROSS_ENTROPY

}  // namespace plexus::cuda_kernels

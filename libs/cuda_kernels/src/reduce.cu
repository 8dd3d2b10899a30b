// Reductions for the engine: deterministic sum of squares, first non-finite element.
#include "device_common.cuh"
#include "plexus_cuda_kernels/reduce.hpp"

namespace plexus::cuda_kernels {
namespace {

using namespace detail;

constexpr int kReduceThreads = 256;
constexpr int64_t kElementsPerThread = 16;
constexpr int64_t kMaxPartials = 1024;  // also the finishing block's thread count

// The first pass's grid, from n alone: the summation order must not depend on the device.
int64_t partial_count(int64_t n) {
  return std::clamp<int64_t>(
      (n + kReduceThreads * kElementsPerThread - 1) / (kReduceThreads * kElementsPerThread), 1, kMaxPartials);
}

template <class D>
__global__ void sum_squares_partials_kernel(int64_t n, const D* x, double* partials) {
  double acc = 0.0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const auto v = static_cast<double>(to_f32(x[i]));
    acc += v * v;  // exact: a float's square fits in a double
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_squares_finish_kernel(int64_t count, const double* partials, double* result,
                                          bool accumulate) {
  double acc = threadIdx.x < count ? partials[threadIdx.x] : 0.0;
  acc = block_sum(acc);
  if (threadIdx.x == 0) *result = accumulate ? *result + acc : acc;
}

template <class D>
__global__ void first_non_finite_kernel(int64_t n, const D* x, unsigned long long* first) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    if (!isfinite(to_f32(x[i]))) atomicMin(first, static_cast<unsigned long long>(i));
}

}  // namespace

template <class T>
void sum_squares(Handle& handle, int64_t n, const T* x, double* result, bool accumulate) {
  constexpr const char* kName = "sum_squares";
  cudaStream_t stream = handle.stream();
  const int64_t count = n > 0 ? partial_count(n) : 0;
  auto* partials = static_cast<double*>(
      handle.scratch(static_cast<std::size_t>(std::max<int64_t>(count, 1)) * sizeof(double)));
  if (count > 0) {
    sum_squares_partials_kernel<<<static_cast<unsigned>(count), kReduceThreads, 0, stream>>>(n, dev(x),
                                                                                             partials);
    check_launch(kName);
  }
  sum_squares_finish_kernel<<<1, static_cast<unsigned>(kMaxPartials), 0, stream>>>(count, partials, result,
                                                                                   accumulate);
  check_launch(kName);
}

template <class T>
void first_non_finite(int64_t n, const T* x, int64_t* first, cudaStream_t stream) {
  // All bits set: -1 as int64_t and the largest value for the unsigned atomic minimum, so "none
  // found" needs no second pass.
  PLEXUS_CUDA_CHECK(cudaMemsetAsync(first, 0xff, sizeof(int64_t), stream), "first_non_finite");
  if (n == 0) return;
  static_assert(sizeof(unsigned long long) == sizeof(int64_t));
  first_non_finite_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      n, dev(x), reinterpret_cast<unsigned long long*>(first));
  check_launch("first_non_finite");
}

template <class T>
bool has_non_finite(Handle& handle, int64_t n, const T* x) {
  auto* first = static_cast<int64_t*>(handle.scratch(sizeof(int64_t)));
  first_non_finite(n, x, first, handle.stream());
  int64_t host = -1;
  PLEXUS_CUDA_CHECK(cudaMemcpyAsync(&host, first, sizeof(host), cudaMemcpyDeviceToHost, handle.stream()),
                    "has_non_finite");
  PLEXUS_CUDA_CHECK(cudaStreamSynchronize(handle.stream()), "has_non_finite");
  return host >= 0;
}

#define PLEXUS_CUDA_KERNELS_REDUCE(T)                                           \
  template void sum_squares<T>(Handle&, int64_t, const T*, double*, bool);      \
  template void first_non_finite<T>(int64_t, const T*, int64_t*, cudaStream_t); \
  template bool has_non_finite<T>(Handle&, int64_t, const T*);
PLEXUS_CUDA_KERNELS_REDUCE(float)
PLEXUS_CUDA_KERNELS_REDUCE(bfloat16)
#undef PLEXUS_CUDA_KERNELS_REDUCE

}  // namespace plexus::cuda_kernels

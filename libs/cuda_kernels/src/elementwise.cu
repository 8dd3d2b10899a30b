// Elementwise helpers: fill, copy, precision conversion, y += x, x *= alpha.
#include "device_common.cuh"
#include "plexus_cuda_kernels/elementwise.hpp"

#include <type_traits>

namespace plexus::cuda_kernels {
namespace {

using namespace detail;

template <class D>
__global__ void fill_kernel(int64_t n, D* x, D value) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) x[i] = value;
}

template <class S, class D>
__global__ void convert_kernel(int64_t n, const S* src, D* dst) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = from_f32<D>(to_f32(src[i]));
}

template <class X, class Y>
__global__ void add_into_kernel(int64_t n, const X* x, Y* y) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    y[i] = from_f32<Y>(to_f32(y[i]) + to_f32(x[i]));
}

template <class D>
__global__ void scale_kernel(int64_t n, D* x, float alpha) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) x[i] = from_f32<D>(to_f32(x[i]) * alpha);
}

// The value as the device type, rounded on the host exactly as the device would.
template <class T>
device_t<T> device_value(float value) {
  if constexpr (std::is_same_v<T, float>) {
    return value;
  } else {
    __nv_bfloat16_raw raw;
    raw.x = to_bfloat16(value).bits;
    return __nv_bfloat16(raw);
  }
}

}  // namespace

template <class T>
void fill(int64_t n, T* x, float value, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(n, dev(x), device_value<T>(value));
  check_launch("fill");
}

template <class T>
void copy(int64_t n, const T* src, T* dst, cudaStream_t stream) {
  if (n == 0) return;
  PLEXUS_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, stream),
      "copy");
}

void convert(int64_t n, const float* src, bfloat16* dst, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(n, src, dev(dst));
  check_launch("convert");
}

void convert(int64_t n, const bfloat16* src, float* dst, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(n, dev(src), dst);
  check_launch("convert");
}

template <class X, class Y>
void add_into(int64_t n, const X* x, Y* y, cudaStream_t stream) {
  if (n == 0) return;
  add_into_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(n, dev(x), dev(y));
  check_launch("add_into");
}

template <class T>
void scale(int64_t n, T* x, float alpha, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(n, dev(x), alpha);
  check_launch("scale");
}

template void fill<float>(int64_t, float*, float, cudaStream_t);
template void fill<bfloat16>(int64_t, bfloat16*, float, cudaStream_t);
template void copy<float>(int64_t, const float*, float*, cudaStream_t);
template void copy<bfloat16>(int64_t, const bfloat16*, bfloat16*, cudaStream_t);
template void copy<int32_t>(int64_t, const int32_t*, int32_t*, cudaStream_t);
template void add_into<float, float>(int64_t, const float*, float*, cudaStream_t);
template void add_into<bfloat16, bfloat16>(int64_t, const bfloat16*, bfloat16*, cudaStream_t);
template void add_into<bfloat16, float>(int64_t, const bfloat16*, float*, cudaStream_t);
template void scale<float>(int64_t, float*, float, cudaStream_t);
template void scale<bfloat16>(int64_t, bfloat16*, float, cudaStream_t);

}  // namespace plexus::cuda_kernels

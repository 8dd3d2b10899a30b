// For .cu files (CUDA syntax): the device type behind an interface element type and the fp32
// conversions every kernel uses, shared by the kernel library and the plugins' own kernels.
//
// The interface's bfloat16 (types.hpp) holds __nv_bfloat16's bits; all arithmetic is fp32: loads
// widen exactly, stores round to nearest even.
#pragma once

#include <cuda_bf16.h>

#include "plexus_cuda_kernels/types.hpp"

namespace plexus::cuda_kernels {

static_assert(sizeof(__nv_bfloat16) == sizeof(bfloat16), "bfloat16 must have the layout of __nv_bfloat16");

template <class T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<bfloat16> {
  using type = __nv_bfloat16;
};
template <class T>
using device_t = typename DeviceType<T>::type;

template <class T>
device_t<T>* dev(T* p) {
  return reinterpret_cast<device_t<T>*>(p);
}
template <class T>
const device_t<T>* dev(const T* p) {
  return reinterpret_cast<const device_t<T>*>(p);
}

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <class D>
__device__ __forceinline__ D from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

}  // namespace plexus::cuda_kernels

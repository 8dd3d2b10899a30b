// device_ops on CUDA devices, over plexus_cuda_kernels, on the default stream (the layers run
// there too, so no extra ordering is needed). The stream reductions of mHC are batched products
// with a vector of ones: out[t] (1 x C) = scale * ones(1 x n) . x[t] (n x C), and the spread
// dx[t] (n x C) = ones(n x 1) . dh[t] (1 x C) / n.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "engine/device_ops_cuda.hpp"
#include "plexus/core/device.hpp"
#include "plexus/tensor.h"
#include "plexus_cuda_kernels/adamw.hpp"
#include "plexus_cuda_kernels/device_buffer.hpp"
#include "plexus_cuda_kernels/elementwise.hpp"
#include "plexus_cuda_kernels/error.hpp"
#include "plexus_cuda_kernels/gemm.hpp"
#include "plexus_cuda_kernels/handle.hpp"
#include "plexus_cuda_kernels/reduce.hpp"
#include "plexus_cuda_kernels/types.hpp"

namespace plexus::device_ops::cuda {
namespace ck = plexus::cuda_kernels;
namespace {

// One cuBLAS handle (and scratch) per device for the engine, on the default stream.
ck::Handle& handle_for(const Tensor& t) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<ck::Handle>> handles;
  const auto id = static_cast<std::size_t>(t.device().device_id);
  std::lock_guard lock(mutex);
  if (handles.size() <= id) handles.resize(id + 1);
  if (!handles[id]) {
    int previous = 0;
    PLEXUS_CUDA_CHECK(cudaGetDevice(&previous), "engine handle");
    PLEXUS_CUDA_CHECK(cudaSetDevice(t.device().device_id), "engine handle");
    handles[id] = std::make_unique<ck::Handle>(nullptr);
    PLEXUS_CUDA_CHECK(cudaSetDevice(previous), "engine handle");
  }
  return *handles[id];
}

bool is_bf16(const Tensor& t) {
  return plx_dtype_equal(t.dtype(), plx_dtype_bf16());
}

// A device vector of `n` ones of type T, grown as needed, per device.
template <class T>
const T* ones(const Tensor& like, int64_t n) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<ck::DeviceArray<T>>> cache;
  const auto id = static_cast<std::size_t>(like.device().device_id);
  std::lock_guard lock(mutex);
  if (cache.size() <= id) cache.resize(id + 1);
  auto& slot = cache[id];
  if (!slot || static_cast<int64_t>(slot->size()) < n) {
    T one{};
    if constexpr (std::is_same_v<T, float>)
      one = 1.0f;
    else
      one = ck::to_bfloat16(1.0f);
    slot = std::make_unique<ck::DeviceArray<T>>(std::vector<T>(static_cast<std::size_t>(n), one));
  }
  return slot->data();
}

}  // namespace

void add_into(Tensor& into, const Tensor& from) {
  if (is_bf16(into))
    ck::add_into<ck::bfloat16, ck::bfloat16>(into.numel(), from.data<ck::bfloat16>(),
                                             into.data<ck::bfloat16>(), nullptr);
  else
    ck::add_into<float, float>(into.numel(), from.data<float>(), into.data<float>(), nullptr);
}

// The small results come from the device's caching allocator (a Tensor), not cudaMalloc: these
// run for every unit's output and every gradient, every step.
int64_t first_non_finite(const Tensor& t) {
  const Tensor first({1}, plx_dtype_i64(), t.device());
  if (is_bf16(t))
    ck::first_non_finite<ck::bfloat16>(t.numel(), t.data<ck::bfloat16>(), first.data<int64_t>(), nullptr);
  else
    ck::first_non_finite<float>(t.numel(), t.data<float>(), first.data<int64_t>(), nullptr);
  int64_t index = -1;
  device::copy(&index, DLDevice{kDLCPU, 0}, first.raw(), t.device(), sizeof index);
  return index;
}

std::vector<int64_t> first_non_finite_each(const std::vector<const Tensor*>& tensors) {
  std::vector<int64_t> first(tensors.size(), -1);
  if (tensors.empty()) return first;
  const Tensor found({static_cast<int64_t>(tensors.size())}, plx_dtype_i64(), tensors.front()->device());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = *tensors[i];
    int64_t* slot = found.data<int64_t>() + i;
    if (is_bf16(t))
      ck::first_non_finite<ck::bfloat16>(t.numel(), t.data<ck::bfloat16>(), slot, nullptr);
    else if (plx_dtype_equal(t.dtype(), plx_dtype_f32()))
      ck::first_non_finite<float>(t.numel(), t.data<float>(), slot, nullptr);
    else
      ck::first_non_finite<float>(0, nullptr, slot, nullptr);  // no values to check: -1
  }
  device::copy(first.data(), DLDevice{kDLCPU, 0}, found.raw(), found.device(),
               first.size() * sizeof(int64_t));
  return first;
}

double sum_of_squares(const std::vector<const Tensor*>& tensors) {
  const Tensor& like = *tensors.front();
  const Tensor result({1}, plx_dtype_f64(), like.device());
  ck::Handle& handle = handle_for(like);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    ck::sum_squares<float>(handle, tensors[i]->numel(), tensors[i]->data<float>(), result.data<double>(),
                           i > 0);
  double sum = 0;
  device::copy(&sum, DLDevice{kDLCPU, 0}, result.raw(), like.device(), sizeof sum);
  return sum;
}

void add_element(Tensor& dst, int64_t i, const Tensor& src, int64_t j) {
  ck::add_into<float, float>(1, src.data<float>() + j, dst.data<float>() + i, nullptr);
}

void adamw_update(const vector_ops::AdamWStep& step, Tensor& weight, const Tensor& grad, Tensor& exp_avg,
                  Tensor& exp_avg_sq) {
  ck::AdamWScalars s;
  s.decay = step.decay;
  s.beta1 = step.beta1;
  s.beta2 = step.beta2;
  s.step_size = step.step_size;
  s.inv_sqrt_c2 = step.inv_sqrt_c2;
  s.eps = step.eps;
  s.clip = step.grad_scale;
  ck::adamw_step(weight.numel(), weight.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                 exp_avg_sq.data<float>(), s, nullptr, nullptr);
}

void expand_streams(const Tensor& e, int64_t tokens, int64_t streams, int64_t hidden, Tensor& x) {
  // Stream j of every token: a 2-D copy with the source pitch C and the destination pitch n*C.
  const std::size_t row = static_cast<std::size_t>(hidden) * dtype_bytes(x.dtype());
  const auto* src = static_cast<const std::byte*>(e.raw());
  auto* dst = static_cast<std::byte*>(x.raw());
  for (int64_t j = 0; j < streams; ++j)
    PLEXUS_CUDA_CHECK(
        cudaMemcpy2DAsync(dst + static_cast<std::size_t>(j) * row, row * static_cast<std::size_t>(streams),
                          src, row, row, static_cast<std::size_t>(tokens), cudaMemcpyDeviceToDevice, nullptr),
        "expand_streams");
}

namespace {

// The stream reductions in the activations' type T: cuBLAS accumulates in fp32 and rounds the
// result once (for bfloat16 too: gemm<bfloat16, bfloat16>).
template <class T>
void reduce_streams_as(const Tensor& x, int64_t tokens, int64_t streams, int64_t hidden, float scale,
                       Tensor& out) {
  ck::gemm_strided_batched<T, T>(handle_for(x), ck::Trans::N, ck::Trans::N, 1, hidden, streams, scale,
                                 ones<T>(x, streams), streams, 0, x.data<T>(), hidden, streams * hidden, 0.0f,
                                 out.data<T>(), hidden, hidden, tokens);
}

template <class T>
void spread_streams_as(const Tensor& dh, int64_t tokens, int64_t streams, int64_t hidden, Tensor& dx) {
  ck::gemm_strided_batched<T, T>(handle_for(dh), ck::Trans::N, ck::Trans::N, streams, hidden, 1,
                                 1.0f / static_cast<float>(streams), ones<T>(dh, streams), 1, 0, dh.data<T>(),
                                 hidden, hidden, 0.0f, dx.data<T>(), hidden, streams * hidden, tokens);
}

}  // namespace

void reduce_streams(const Tensor& x, int64_t tokens, int64_t streams, int64_t hidden, float scale,
                    Tensor& out) {
  if (is_bf16(x))
    reduce_streams_as<ck::bfloat16>(x, tokens, streams, hidden, scale, out);
  else
    reduce_streams_as<float>(x, tokens, streams, hidden, scale, out);
}

void spread_streams(const Tensor& dh, int64_t tokens, int64_t streams, int64_t hidden, Tensor& dx) {
  if (is_bf16(dh))
    spread_streams_as<ck::bfloat16>(dh, tokens, streams, hidden, dx);
  else
    spread_streams_as<float>(dh, tokens, streams, hidden, dx);
}

}  // namespace plexus::device_ops::cuda

// The CUDA instance of an in-tree "mhc" backend: one per GPU, running the backend's CUDA
// primitives. It is the Kernels::Cuda of the SDK's MhcBackendScaffold
// (plexus/cpp/mhc_backend.hpp), so a backend's CUDA side is its primitives only:
//
//   // the class template CudaPrimitives<A>, A the activation type (float or
//   // cuda_kernels::bfloat16), with the eight primitives taking the GPU's Handle first
//   PLEXUS_MHC_PRIMITIVES_WITH(CudaPrimitives, cuda_kernels::Handle&);
//   ...
//   using Cuda = plexus::mhc_backend::MhcCudaInstance<CudaPrimitives, float, cuda_kernels::bfloat16>;
//
// Each call checks the activation dtype against the instance's activation types, makes the
// instance's GPU current for its duration, binds the Handle to the call's stream (plx_stream ->
// cudaStream_t through the host's stream_native; NULL is the legacy default stream), runs
// CudaPrimitives<A> for that dtype, which enqueue their kernels on handle.stream(), and returns
// without waiting for them. Calls on one instance are serialized by a mutex: they share the
// Handle's stream binding and scratch. Plain C++ (no CUDA syntax), for a plugin's plugin.cpp; it
// exists in a build with CUDA only (PLEXUS_MHC_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "plexus/cpp/error.hpp"
#include "plexus/cpp/mhc.hpp"
#include "plexus/cpp/tensor.hpp"
#include "plexus_cuda_kernels/current_device.hpp"
#include "plexus_cuda_kernels/handle.hpp"
#include "plexus_cuda_kernels/types.hpp"

namespace plexus::mhc_backend {

using plexus::sdk::MhcProblem;

// The Handle of one GPU instance (its cuBLAS handle and workspace, and the device scratch the
// primitives' temporaries are carved from), created and destroyed on its GPU and lent to one call
// at a time.
class GpuHandle {
 public:
  // Throws plexus::sdk::Error(PLX_ERR_UNSUPPORTED), naming `backend`, when there is no GPU
  // `device_id` here.
  GpuHandle(const char* backend, int device_id, const cuda_kernels::HandleOptions& options);
  ~GpuHandle();
  GpuHandle(const GpuHandle&) = delete;
  GpuHandle& operator=(const GpuHandle&) = delete;

  // fn(handle) with this GPU current and the handle bound to the call's stream, under the lock.
  template <class Fn>
  void run(plx_stream stream, Fn&& fn) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const cuda_kernels::CurrentDevice current(device_);
    handle_->set_stream(native_stream(stream));
    fn(*handle_);
  }

 private:
  static cudaStream_t native_stream(plx_stream stream);  // nullptr: the default stream

  int device_;
  std::mutex mutex_;
  std::unique_ptr<cuda_kernels::Handle> handle_;
};

// The activation types CUDA primitives are written for: their dtype, and its name in messages.
template <class A>
struct Activation;
template <>
struct Activation<float> {
  static DLDataType dtype() noexcept { return plx_dtype_f32(); }
  static constexpr const char* name = "float32";
};
template <>
struct Activation<cuda_kernels::bfloat16> {
  static DLDataType dtype() noexcept { return plx_dtype_bf16(); }
  static constexpr const char* name = "bfloat16";
};

// Runs Primitives<A> (declared with PLEXUS_MHC_PRIMITIVES_WITH(Primitives, cuda_kernels::Handle&))
// for the call's activation type A, one of Activations (float32 mappings with either).
template <template <class> class Primitives, class... Activations>
class MhcCudaInstance {
 public:
  // For the scaffold: the CPU's refusal of bfloat16 says it runs here.
  static constexpr bool runs_bfloat16 = (std::is_same_v<Activations, cuda_kernels::bfloat16> || ...);

  // `backend` (static storage: the component's name) starts every message.
  MhcCudaInstance(const char* backend, int device_id, const cuda_kernels::HandleOptions& options = {})
      : backend_(backend), handle_(backend, device_id, options) {}

#define PLEXUS_MHC_CUDA_ACTIVATION_CALL(primitive, args_type)                                          \
  void primitive(const MhcProblem& p, const args_type& a, plx_stream s) {                              \
    run(p, s, [&]<class A>(cuda_kernels::Handle& handle) { Primitives<A>::primitive(handle, p, a); }); \
  }
  PLEXUS_MHC_CUDA_ACTIVATION_CALL(proj_rms_forward, plx_mhc_proj_rms_forward_args)
  PLEXUS_MHC_CUDA_ACTIVATION_CALL(proj_rms_backward, plx_mhc_proj_rms_backward_args)
  PLEXUS_MHC_CUDA_ACTIVATION_CALL(aggregate_forward, plx_mhc_aggregate_forward_args)
  PLEXUS_MHC_CUDA_ACTIVATION_CALL(aggregate_backward, plx_mhc_aggregate_backward_args)
  PLEXUS_MHC_CUDA_ACTIVATION_CALL(post_res_forward, plx_mhc_post_res_forward_args)
  PLEXUS_MHC_CUDA_ACTIVATION_CALL(post_res_backward, plx_mhc_post_res_backward_args)
#undef PLEXUS_MHC_CUDA_ACTIVATION_CALL

  // The mappings see only mapping tensors: the call's dtype is p's, the mapping dtype, float32
  // whenever run accepts it (float64 is refused), so they are Primitives<float>'s whatever the
  // activations of the other calls.
  void mappings_forward(const MhcProblem& p, const plx_mhc_mappings_forward_args& a, plx_stream s) {
    run(p, s,
        [&]<class>(cuda_kernels::Handle& handle) { Primitives<float>::mappings_forward(handle, p, a); });
  }
  void mappings_backward(const MhcProblem& p, const plx_mhc_mappings_backward_args& a, plx_stream s) {
    run(p, s,
        [&]<class>(cuda_kernels::Handle& handle) { Primitives<float>::mappings_backward(handle, p, a); });
  }

 private:
  // fn.operator()<A>(handle) for the call's activation type, or the refusal of its dtype.
  template <class Fn>
  void run(const MhcProblem& p, plx_stream stream, Fn&& fn) {
    if (!(run_if<Activations>(p, stream, fn) || ...))
      throw plexus::sdk::Error(PLX_ERR_UNSUPPORTED, std::string(backend_) + " runs " + activation_names() +
                                                        " activations on CUDA, not " +
                                                        plexus::sdk::dtype_name(p.activation_dtype) +
                                                        " (float64 runs on the CPU)");
  }
  template <class A, class Fn>
  bool run_if(const MhcProblem& p, plx_stream stream, Fn& fn) {
    if (!plx_dtype_equal(p.activation_dtype, Activation<A>::dtype())) return false;
    handle_.run(stream, [&](cuda_kernels::Handle& handle) { fn.template operator()<A>(handle); });
    return true;
  }
  // "float32", "float32 and bfloat16"
  static std::string activation_names() {
    std::string names;
    ((names += (names.empty() ? "" : " and ") + std::string(Activation<Activations>::name)), ...);
    return names;
  }

  const char* backend_;
  GpuHandle handle_;
};

}  // namespace plexus::mhc_backend

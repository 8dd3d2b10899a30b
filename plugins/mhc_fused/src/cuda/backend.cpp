// The CUDA instance of mhc_fused (backend.hpp): device, stream, dtype, then the primitive.
#include "backend.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "plexus/cpp/host.hpp"
#include "plexus_cuda_kernels/current_device.hpp"
#include "primitives.hpp"

namespace plexus::mhc_fused::gpu {
namespace {

using cuda_kernels::CurrentDevice;
using plexus::sdk::Error;

// The call's cudaStream_t (NULL: the default stream).
cudaStream_t native_stream(plx_stream stream) {
  return static_cast<cudaStream_t>(plexus::sdk::Host::current().stream_native(stream));
}

// The Handle's cuBLAS workspace: no call here uses cuBLAS (the products are this plugin's own
// kernels), so it stays small.
cuda_kernels::HandleOptions handle_options() {
  cuda_kernels::HandleOptions options;
  options.blas_workspace_bytes = std::size_t{1} << 20;
  return options;
}

}  // namespace

CudaFused::CudaFused(int device_id) : device_(device_id) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // clear the error: it is reported here, not later
    count = 0;
  }
  if (device_id < 0 || device_id >= count)
    throw Error(PLX_ERR_UNSUPPORTED, "mhc_fused: there is no CUDA device cuda:" + std::to_string(device_id) +
                                         " here (" + std::to_string(count) + " visible)");
  const CurrentDevice current(device_);
  handle_ = std::make_unique<cuda_kernels::Handle>(nullptr, handle_options());
}

CudaFused::~CudaFused() {
  // The Handle's buffers belong to this device.
  if (handle_ == nullptr) return;
  try {
    const CurrentDevice current(device_);
    handle_.reset();
  } catch (...) {  // a destructor must not throw; the buffers are released with the context
  }
}

// fn(handle, activation) with activation a float or bfloat16 tag, for the activation dtype.
template <class Fn>
void CudaFused::run(const MhcProblem& p, plx_stream stream, Fn&& fn) {
  const bool f32 = plx_dtype_equal(p.activation_dtype, plx_dtype_f32());
  const bool bf16 = plx_dtype_equal(p.activation_dtype, plx_dtype_bf16());
  if (!f32 && !bf16)
    throw Error(PLX_ERR_UNSUPPORTED, "mhc_fused runs float32 and bfloat16 activations on CUDA, not " +
                                         plexus::sdk::dtype_name(p.activation_dtype) +
                                         " (float64 runs on the CPU)");
  const std::lock_guard<std::mutex> lock(mutex_);
  const CurrentDevice current(device_);
  handle_->set_stream(native_stream(stream));
  if (f32)
    fn.template operator()<float>(*handle_);
  else
    fn.template operator()<bfloat16>(*handle_);
}

#define PLX_MHC_CUDA_CALL(name, args_type)                                                 \
  void CudaFused::name(const MhcProblem& p, const args_type& a, plx_stream s) {            \
    run(p, s, [&]<class A>(cuda_kernels::Handle& handle) { gpu::name<A>(handle, p, a); }); \
  }
PLX_MHC_CUDA_CALL(proj_rms_forward, plx_mhc_proj_rms_forward_args)
PLX_MHC_CUDA_CALL(proj_rms_backward, plx_mhc_proj_rms_backward_args)
PLX_MHC_CUDA_CALL(aggregate_forward, plx_mhc_aggregate_forward_args)
PLX_MHC_CUDA_CALL(aggregate_backward, plx_mhc_aggregate_backward_args)
PLX_MHC_CUDA_CALL(post_res_forward, plx_mhc_post_res_forward_args)
PLX_MHC_CUDA_CALL(post_res_backward, plx_mhc_post_res_backward_args)
#undef PLX_MHC_CUDA_CALL

// The mappings see only mapping tensors: their dtype is float32 here (float64 is refused by run).
void CudaFused::mappings_forward(const MhcProblem& p, const plx_mhc_mappings_forward_args& a, plx_stream s) {
  run(p, s, [&]<class A>(cuda_kernels::Handle& handle) { gpu::mappings_forward(handle, p, a); });
}
void CudaFused::mappings_backward(const MhcProblem& p, const plx_mhc_mappings_backward_args& a,
                                  plx_stream s) {
  run(p, s, [&]<class A>(cuda_kernels::Handle& handle) { gpu::mappings_backward(handle, p, a); });
}

}  // namespace plexus::mhc_fused::gpu

// The CUDA instance of mhc_native (backend.hpp): device, stream, dtype, then the primitive.
#include "backend.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "plexus/cpp/host.hpp"
#include "plexus_cuda_kernels/current_device.hpp"
#include "primitives.hpp"

namespace plexus::mhc_native::gpu {
namespace {

using cuda_kernels::CurrentDevice;
using plexus::sdk::Error;

// The call's cudaStream_t (NULL: the default stream).
cudaStream_t native_stream(plx_stream stream) {
  return static_cast<cudaStream_t>(plexus::sdk::Host::current().stream_native(stream));
}

}  // namespace

CudaMhc::CudaMhc(int device_id) : device_(device_id) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // clear the error: it is reported here, not later
    count = 0;
  }
  if (device_id < 0 || device_id >= count)
    throw Error(PLX_ERR_UNSUPPORTED, "mhc_native: there is no CUDA device cuda:" + std::to_string(device_id) +
                                         " here (" + std::to_string(count) + " visible)");
  const CurrentDevice current(device_);
  handle_ = std::make_unique<cuda_kernels::Handle>();  // fp32 products without TF32, like the CPU
}

CudaMhc::~CudaMhc() {
  // The Handle's cuBLAS handle and buffers belong to this device.
  if (handle_ == nullptr) return;
  try {
    const CurrentDevice current(device_);
    handle_.reset();
  } catch (...) {  // a destructor must not throw; the buffers are released with the context
  }
}

template <class Fn>
void CudaMhc::run(const MhcProblem& p, plx_stream stream, Fn&& fn) {
  if (!plx_dtype_equal(p.activation_dtype, plx_dtype_f32()))
    throw Error(PLX_ERR_UNSUPPORTED, "mhc_native runs float32 activations on CUDA, not " +
                                         plexus::sdk::dtype_name(p.activation_dtype) +
                                         " (float64 runs on the CPU)");
  const std::lock_guard<std::mutex> lock(mutex_);
  const CurrentDevice current(device_);
  handle_->set_stream(native_stream(stream));
  fn(*handle_);
}

#define PLX_MHC_CUDA_CALL(name, args_type)                                          \
  void CudaMhc::name(const MhcProblem& p, const args_type& a, plx_stream s) {       \
    run(p, s, [&](cuda_kernels::Handle& handle) { gpu::name(handle, p, a); });     \
  }
PLX_MHC_CUDA_CALL(proj_rms_forward, plx_mhc_proj_rms_forward_args)
PLX_MHC_CUDA_CALL(proj_rms_backward, plx_mhc_proj_rms_backward_args)
PLX_MHC_CUDA_CALL(mappings_forward, plx_mhc_mappings_forward_args)
PLX_MHC_CUDA_CALL(mappings_backward, plx_mhc_mappings_backward_args)
PLX_MHC_CUDA_CALL(aggregate_forward, plx_mhc_aggregate_forward_args)
PLX_MHC_CUDA_CALL(aggregate_backward, plx_mhc_aggregate_backward_args)
PLX_MHC_CUDA_CALL(post_res_forward, plx_mhc_post_res_forward_args)
PLX_MHC_CUDA_CALL(post_res_backward, plx_mhc_post_res_backward_args)
#undef PLX_MHC_CUDA_CALL

}  // namespace plexus::mhc_native::gpu

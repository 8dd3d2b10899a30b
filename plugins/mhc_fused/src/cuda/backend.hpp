// The CUDA device of mhc_fused: an instance per GPU holding a plexus_cuda_kernels Handle (the
// stream binding and the device scratch the calls' temporaries are carved from). Plain C++ (no
// CUDA syntax), for plugin.cpp.
//
// Each call makes the instance's GPU current for its duration, binds the Handle to the call's
// stream (plx_stream -> cudaStream_t through the host's stream_native; NULL is the legacy default
// stream), picks the kernels for the activation dtype (float32 or bfloat16, with float32
// mappings), enqueues them and returns without waiting. Calls on one instance are serialized by a
// mutex: they share the Handle's stream binding and scratch.
#pragma once

#include <memory>
#include <mutex>

#include "../fused.hpp"
#include "plexus_cuda_kernels/handle.hpp"

namespace plexus::mhc_fused::gpu {

class CudaFused {
 public:
  // Throws plexus::sdk::Error(PLX_ERR_UNSUPPORTED) when there is no GPU `device_id` here.
  explicit CudaFused(int device_id);
  ~CudaFused();
  CudaFused(const CudaFused&) = delete;
  CudaFused& operator=(const CudaFused&) = delete;

  void proj_rms_forward(const MhcProblem& p, const plx_mhc_proj_rms_forward_args& a, plx_stream s);
  void proj_rms_backward(const MhcProblem& p, const plx_mhc_proj_rms_backward_args& a, plx_stream s);
  void mappings_forward(const MhcProblem& p, const plx_mhc_mappings_forward_args& a, plx_stream s);
  void mappings_backward(const MhcProblem& p, const plx_mhc_mappings_backward_args& a, plx_stream s);
  void aggregate_forward(const MhcProblem& p, const plx_mhc_aggregate_forward_args& a, plx_stream s);
  void aggregate_backward(const MhcProblem& p, const plx_mhc_aggregate_backward_args& a, plx_stream s);
  void post_res_forward(const MhcProblem& p, const plx_mhc_post_res_forward_args& a, plx_stream s);
  void post_res_backward(const MhcProblem& p, const plx_mhc_post_res_backward_args& a, plx_stream s);

 private:
  template <class Fn>
  void run(const MhcProblem& p, plx_stream stream, Fn&& fn);

  int device_;
  std::mutex mutex_;
  std::unique_ptr<cuda_kernels::Handle> handle_;
};

}  // namespace plexus::mhc_fused::gpu

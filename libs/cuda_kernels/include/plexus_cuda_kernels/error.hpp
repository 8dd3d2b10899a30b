// plexus_cuda_kernels: failed CUDA and cuBLAS calls become exceptions naming the call and the
// kernel (or function) that made it.
//
// Kernel launches are checked with cudaGetLastError right after the launch: that reports
// configuration errors at once; faults inside a kernel surface at the next synchronizing call.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>

namespace plexus::cuda_kernels {

// Thrown for every failed CUDA or cuBLAS call. The library is linked with hidden visibility, so
// code in another shared object should catch std::runtime_error.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CudaError("<where>: <call> failed: <error name> (<error string>)") unless status is
// cudaSuccess.
void check_cuda(cudaError_t status, const char* call, const char* where);

}  // namespace plexus::cuda_kernels

// PLEXUS_CUDA_CHECK(cudaMemsetAsync(p, 0, n, s), "fill"): the call's own text names it.
#define PLEXUS_CUDA_CHECK(call, where) ::plexus::cuda_kernels::check_cuda((call), #call, (where))

// Internal: checked calls for cuBLAS and kernel launches (CUDA runtime calls use
// PLEXUS_CUDA_CHECK from the public error.hpp).
#pragma once

#include <cublas_v2.h>

#include "plexus_cuda_kernels/error.hpp"

namespace plexus::cuda_kernels::detail {

// Throws CudaError("<where>: <call> failed: <status name> (<status string>)") unless success.
void check_cublas(cublasStatus_t status, const char* call, const char* where);

// Right after a launch: reports an invalid configuration (or an earlier asynchronous failure)
// under the kernel's name.
inline void check_launch(const char* kernel) {
  check_cuda(cudaGetLastError(), "kernel launch", kernel);
}

}  // namespace plexus::cuda_kernels::detail

#define PLEXUS_CUBLAS_CHECK(call, where) ::plexus::cuda_kernels::detail::check_cublas((call), #call, (where))

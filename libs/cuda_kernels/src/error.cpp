#include "plexus_cuda_kernels/error.hpp"

#include <string>

#include "check.hpp"

namespace plexus::cuda_kernels {

void check_cuda(cudaError_t status, const char* call, const char* where) {
  if (status == cudaSuccess) return;
  throw CudaError(std::string(where) + ": " + call + " failed: " + cudaGetErrorName(status) + " (" +
                  cudaGetErrorString(status) + ")");
}

namespace detail {

void check_cublas(cublasStatus_t status, const char* call, const char* where) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string(where) + ": " + call + " failed: " + cublasGetStatusName(status) + " (" +
                  cublasGetStatusString(status) + ")");
}

}  // namespace detail
}  // namespace plexus::cuda_kernels

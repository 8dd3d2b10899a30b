#include "plexus_cuda_kernels/gemm.hpp"

#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "check.hpp"

namespace plexus::cuda_kernels {
namespace {

template <class T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>)
    return CUDA_R_32F;
  else
    return CUDA_R_16BF;
}

// fp32 inputs: exact fp32 products unless the handle allows TF32. bf16 inputs: tensor cores with
// fp32 accumulation (the bf16 products are exact in fp32).
template <class AB>
cublasComputeType_t compute_type(const Handle& handle) {
  if constexpr (std::is_same_v<AB, float>)
    return handle.allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  else
    return CUBLAS_COMPUTE_32F;
}

int to_int(int64_t value, const char* what, const char* where) {
  if (value < 0 || value > INT_MAX)
    throw std::invalid_argument(std::string(where) + ": " + what + " = " + std::to_string(value) +
                                " is outside cuBLAS's int range");
  return static_cast<int>(value);
}

cublasOperation_t op(Trans t) {
  return t == Trans::T ? CUBLAS_OP_T : CUBLAS_OP_N;
}

}  // namespace

// Row-major C[m, n] is column-major C^T[n, m] = op(B)^T op(A)^T: a row-major matrix is its own
// transpose in column-major order, so B goes first and each operand keeps its Trans.
template <class AB, class C>
void gemm(Handle& handle, Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const AB* a,
          int64_t lda, const AB* b, int64_t ldb, float beta, C* c, int64_t ldc) {
  constexpr const char* kWhere = "gemm";
  if (m == 0 || n == 0) return;
  PLEXUS_CUBLAS_CHECK(
      cublasGemmEx(handle.blas(), op(tb), op(ta), to_int(n, "n", kWhere), to_int(m, "m", kWhere),
                   to_int(k, "k", kWhere), &alpha, b, data_type<AB>(), to_int(ldb, "ldb", kWhere), a,
                   data_type<AB>(), to_int(lda, "lda", kWhere), &beta, c, data_type<C>(),
                   to_int(ldc, "ldc", kWhere), compute_type<AB>(handle), CUBLAS_GEMM_DEFAULT),
      kWhere);
}

template <class AB, class C>
void gemm_strided_batched(Handle& handle, Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const AB* a, int64_t lda, int64_t stride_a, const AB* b, int64_t ldb,
                          int64_t stride_b, float beta, C* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  constexpr const char* kWhere = "gemm_strided_batched";
  if (m == 0 || n == 0 || batch == 0) return;
  PLEXUS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
                          handle.blas(), op(tb), op(ta), to_int(n, "n", kWhere), to_int(m, "m", kWhere),
                          to_int(k, "k", kWhere), &alpha, b, data_type<AB>(), to_int(ldb, "ldb", kWhere),
                          stride_b, a, data_type<AB>(), to_int(lda, "lda", kWhere), stride_a, &beta, c,
                          data_type<C>(), to_int(ldc, "ldc", kWhere), stride_c,
                          to_int(batch, "batch", kWhere), compute_type<AB>(handle), CUBLAS_GEMM_DEFAULT),
                      kWhere);
}

#define PLEXUS_CUDA_KERNELS_GEMM(AB, C)                                                                      \
  template void gemm<AB, C>(Handle&, Trans, Trans, int64_t, int64_t, int64_t, float, const AB*, int64_t,     \
                            const AB*, int64_t, float, C*, int64_t);                                         \
  template void gemm_strided_batched<AB, C>(Handle&, Trans, Trans, int64_t, int64_t, int64_t, float,         \
                                            const AB*, int64_t, int64_t, const AB*, int64_t, int64_t, float, \
                                            C*, int64_t, int64_t, int64_t);
PLEXUS_CUDA_KERNELS_GEMM(float, float)
PLEXUS_CUDA_KERNELS_GEMM(bfloat16, bfloat16)
PLEXUS_CUDA_KERNELS_GEMM(bfloat16, float)
#undef PLEXUS_CUDA_KERNELS_GEMM

}  // namespace plexus::cuda_kernels

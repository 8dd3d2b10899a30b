// plexus_cuda_kernels: dense matrix products through cuBLAS, row-major like plexus_kernels/gemm.hpp.
//
//   C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C
//
// op(X) is X (Trans::N) or its transpose (Trans::T); leading dimensions are row strides in
// elements: A is stored [m, k] (N) or [k, m] (T), B is stored [k, n] (N) or [n, k] (T). k == 0
// scales C by beta. Row-major C is computed as the column-major product C^T = op(B)^T op(A)^T, so
// no data is transposed.
//
// Element types (AB = the type of A and B, C = the type of C), all accumulating in fp32:
//   <float, float>        fp32; TF32 tensor cores only if handle.allow_tf32()
//   <bfloat16, bfloat16>  bf16 inputs and output (rounded once, from the fp32 accumulator)
//   <bfloat16, float>     bf16 inputs, fp32 output (e.g. weight gradients, attention scores)
// alpha and beta are host floats. Sizes and leading dimensions must fit in int (cuBLAS's API);
// larger ones throw std::invalid_argument.
#pragma once

#include <cstdint>

#include "plexus_cuda_kernels/handle.hpp"
#include "plexus_cuda_kernels/types.hpp"

namespace plexus::cuda_kernels {

enum class Trans : bool { N = false, T = true };

template <class AB, class C>
void gemm(Handle& handle, Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const AB* a,
          int64_t lda, const AB* b, int64_t ldb, float beta, C* c, int64_t ldc);

// `batch` independent products; product i uses a + i * stride_a, b + i * stride_b and
// c + i * stride_c (strides in elements).
template <class AB, class C>
void gemm_strided_batched(Handle& handle, Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const AB* a, int64_t lda, int64_t stride_a, const AB* b, int64_t ldb,
                          int64_t stride_b, float beta, C* c, int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace plexus::cuda_kernels

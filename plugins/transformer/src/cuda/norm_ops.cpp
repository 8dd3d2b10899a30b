#include "cuda/norm_ops.hpp"

#include "plexus_cuda_kernels/norm.hpp"

namespace plexus::transformer::cuda {

namespace ck = plexus::cuda_kernels;

template <class T>
void norm_forward(const NormSpec& norm, int64_t rows, const T* x, const float* w, const float* b, T* y,
                  T* xhat, float* rstd, cudaStream_t stream) {
  // eps rounded to float32 as the CPU's float32 path does (static_cast<T>(eps)); the kernels
  // compute in fp32 for bf16 activations too.
  const auto eps = static_cast<float>(norm.eps);
  if (norm.rms)
    ck::rmsnorm_forward<T>(rows, norm.cols, x, w, eps, y, xhat, rstd, stream);
  else
    ck::layernorm_forward<T>(rows, norm.cols, x, w, b, eps, y, xhat, rstd, stream);
}

template <class T>
void norm_backward(const NormSpec& norm, ck::Handle& handle, int64_t rows, const T* dy, const T* xhat,
                   const float* rstd, const float* w, T* dx, float* dw, float* db) {
  if (norm.rms)
    ck::rmsnorm_backward<T>(handle, rows, norm.cols, dy, xhat, rstd, w, dx, dw);
  else
    ck::layernorm_backward<T>(handle, rows, norm.cols, dy, xhat, rstd, w, dx, dw, db);
}

template <class T>
void norm_apply(const NormSpec& norm, int64_t rows, const T* xhat, const float* w, const float* b, T* y,
                cudaStream_t stream) {
  ck::norm_apply<T>(rows, norm.cols, xhat, w, norm.rms ? nullptr : b, y, stream);
}

#define PLEXUS_NORM_OPS(T)                                                                                \
  template void norm_forward<T>(const NormSpec&, int64_t, const T*, const float*, const float*, T*, T*,   \
                                float*, cudaStream_t);                                                    \
  template void norm_backward<T>(const NormSpec&, ck::Handle&, int64_t, const T*, const T*, const float*, \
                                 const float*, T*, float*, float*);                                       \
  template void norm_apply<T>(const NormSpec&, int64_t, const T*, const float*, const float*, T*,         \
                              cudaStream_t);
PLEXUS_NORM_OPS(float)
PLEXUS_NORM_OPS(ck::bfloat16)
#undef PLEXUS_NORM_OPS

}  // namespace plexus::transformer::cuda

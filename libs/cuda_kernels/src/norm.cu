// RMSNorm and LayerNorm on the GPU: one block per row for the row-wise work, and a deterministic
// two-pass column reduction for the weight and bias gradients.
#include "device_common.cuh"
#include "plexus_cuda_kernels/norm.hpp"

namespace plexus::cuda_kernels {
namespace {

using namespace detail;

// Rows per block of the column reduction: from `rows` alone, so the summation order (and the
// result) never depends on the device; at most kMaxRowBlocks partial rows.
constexpr int64_t kMinRowsPerBlock = 16;
constexpr int64_t kMaxRowBlocks = 512;
constexpr int kColumnThreads = 128;

int64_t rows_per_block(int64_t rows) {
  return std::max(kMinRowsPerBlock, (rows + kMaxRowBlocks - 1) / kMaxRowBlocks);
}

// kLayer: LayerNorm (mean subtracted, bias added); else RMSNorm.
template <bool kLayer, class D>
__global__ void norm_forward_kernel(int64_t cols, const D* x, const float* w, const float* b, float eps, D* y,
                                    D* xhat, float* rstd) {
  const int64_t r = blockIdx.x;
  const D* xr = x + r * cols;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float mean = 0.0f;
  if constexpr (kLayer) {
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += to_f32(xr[c]);
    mean = block_sum(sum) * inv_cols;
  }
  float ss = 0.0f;  // LayerNorm: the second pass of a two-pass variance (no cancellation)
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = to_f32(xr[c]) - mean;
    ss += d * d;
  }
  const float rs = 1.0f / sqrtf(block_sum(ss) * inv_cols + eps);
  D* yr = y + r * cols;
  D* hr = xhat != nullptr ? xhat + r * cols : nullptr;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float h = (to_f32(xr[c]) - mean) * rs;
    if (hr != nullptr) hr[c] = from_f32<D>(h);
    float out = h * w[c];
    if constexpr (kLayer) out += b[c];
    yr[c] = from_f32<D>(out);
  }
  if (rstd != nullptr && threadIdx.x == 0) rstd[r] = rs;
}

template <bool kLayer, class D>
__global__ void norm_backward_dx_kernel(int64_t cols, const D* dy, const D* xhat, const float* rstd,
                                        const float* w, D* dx) {
  const int64_t r = blockIdx.x;
  const D* g = dy + r * cols;
  const D* h = xhat + r * cols;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float sum = 0.0f, dot = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float gw = to_f32(g[c]) * w[c];
    if constexpr (kLayer) sum += gw;
    dot += gw * to_f32(h[c]);
  }
  dot = block_sum(dot) * inv_cols;
  if constexpr (kLayer) sum = block_sum(sum) * inv_cols;
  const float rs = rstd[r];
  D* d = dx + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float gw = to_f32(g[c]) * w[c];
    d[c] = from_f32<D>(rs * (gw - sum - to_f32(h[c]) * dot));
  }
}

// Pass 1: partial column sums over one block of rows (blockIdx.y): dw_part[y, c] = sum dy * xhat,
// db_part[y, c] = sum dy, rows in order. Threads of a warp read consecutive columns (coalesced).
template <class D>
__global__ void column_partials_kernel(int64_t rows, int64_t cols, int64_t block_rows, const D* dy,
                                       const D* xhat, float* dw_part, float* db_part) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * block_rows;
  const int64_t r1 = min(rows, r0 + block_rows);
  float aw = 0.0f, ab = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const float g = to_f32(dy[r * cols + c]);
    if (dw_part != nullptr) aw += g * to_f32(xhat[r * cols + c]);
    ab += g;
  }
  if (dw_part != nullptr) dw_part[blockIdx.y * cols + c] = aw;
  if (db_part != nullptr) db_part[blockIdx.y * cols + c] = ab;
}

// Pass 2: out[c] += the partials of column c, in block order.
__global__ void column_finish_kernel(int64_t blocks, int64_t cols, const float* part, float* out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int64_t k = 0; k < blocks; ++k) s += part[k * cols + c];
  out[c] += s;
}

template <bool kLayer, class T>
void run_forward(const char* name, int64_t rows, int64_t cols, const T* x, const float* w, const float* b,
                 float eps, T* y, T* xhat, float* rstd, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  norm_forward_kernel<kLayer><<<row_blocks(rows, name), row_threads(cols), 0, stream>>>(
      cols, dev(x), w, b, eps, dev(y), dev(xhat), rstd);
  check_launch(name);
}

template <bool kLayer, class T>
void run_backward(const char* name, Handle& handle, int64_t rows, int64_t cols, const T* dy, const T* xhat,
                  const float* rstd, const float* w, T* dx, float* dw, float* db) {
  if (rows == 0 || cols == 0) return;
  cudaStream_t stream = handle.stream();
  if (dx != nullptr) {
    norm_backward_dx_kernel<kLayer><<<row_blocks(rows, name), row_threads(cols), 0, stream>>>(
        cols, dev(dy), dev(xhat), rstd, w, dev(dx));
    check_launch(name);
  }
  if (dw == nullptr && db == nullptr) return;
  const int64_t block_rows = rows_per_block(rows);
  const int64_t blocks = (rows + block_rows - 1) / block_rows;
  const auto n = static_cast<std::size_t>(blocks * cols);
  Carve sizes;
  sizes.take<float>(dw != nullptr ? n : 0);
  sizes.take<float>(db != nullptr ? n : 0);
  Carve carve(handle.scratch(sizes.bytes()));
  float* dw_part = dw != nullptr ? carve.take<float>(n) : nullptr;
  float* db_part = db != nullptr ? carve.take<float>(n) : nullptr;
  const dim3 grid(static_cast<unsigned>((cols + kColumnThreads - 1) / kColumnThreads),
                  static_cast<unsigned>(blocks));
  column_partials_kernel<<<grid, kColumnThreads, 0, stream>>>(rows, cols, block_rows, dev(dy), dev(xhat),
                                                              dw_part, db_part);
  check_launch(name);
  const auto finish_blocks = static_cast<unsigned>((cols + kColumnThreads - 1) / kColumnThreads);
  if (dw != nullptr) {
    column_finish_kernel<<<finish_blocks, kColumnThreads, 0, stream>>>(blocks, cols, dw_part, dw);
    check_launch(name);
  }
  if (db != nullptr) {
    column_finish_kernel<<<finish_blocks, kColumnThreads, 0, stream>>>(blocks, cols, db_part, db);
    check_launch(name);
  }
}

template <class D>
__global__ void norm_apply_kernel(int64_t rows, int64_t cols, const D* xhat, const float* w, const float* b,
                                  D* y) {
  for (int64_t i = global_thread(); i < rows * cols; i += grid_threads()) {
    const int64_t c = i % cols;
    float out = to_f32(xhat[i]) * w[c];
    if (b != nullptr) out += b[c];
    y[i] = from_f32<D>(out);
  }
}

}  // namespace

template <class T>
void rmsnorm_forward(int64_t rows, int64_t cols, const T* x, const float* w, float eps, T* y, T* xhat,
                     float* rstd, cudaStream_t stream) {
  run_forward<false>("rmsnorm_forward", rows, cols, x, w, nullptr, eps, y, xhat, rstd, stream);
}

template <class T>
void layernorm_forward(int64_t rows, int64_t cols, const T* x, const float* w, const float* b, float eps,
                       T* y, T* xhat, float* rstd, cudaStream_t stream) {
  run_forward<true>("layernorm_forward", rows, cols, x, w, b, eps, y, xhat, rstd, stream);
}

template <class T>
void rmsnorm_backward(Handle& handle, int64_t rows, int64_t cols, const T* dy, const T* xhat,
                      const float* rstd, const float* w, T* dx, float* dw) {
  run_backward<false>("rmsnorm_backward", handle, rows, cols, dy, xhat, rstd, w, dx, dw, nullptr);
}

template <class T>
void layernorm_backward(Handle& handle, int64_t rows, int64_t cols, const T* dy, const T* xhat,
                        const float* rstd, const float* w, T* dx, float* dw, float* db) {
  run_backward<true>("layernorm_backward", handle, rows, cols, dy, xhat, rstd, w, dx, dw, db);
}

template <class T>
void norm_apply(int64_t rows, int64_t cols, const T* xhat, const float* w, const float* b, T* y,
                cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  norm_apply_kernel<<<elementwise_blocks(rows * cols), kElementwiseThreads, 0, stream>>>(
      rows, cols, dev(xhat), w, b, dev(y));
  check_launch("norm_apply");
}

#define PLEXUS_CUDA_KERNELS_NORM(T)                                                                         \
  template void rmsnorm_forward<T>(int64_t, int64_t, const T*, const float*, float, T*, T*, float*,         \
                                   cudaStream_t);                                                           \
  template void layernorm_forward<T>(int64_t, int64_t, const T*, const float*, const float*, float, T*, T*, \
                                     float*, cudaStream_t);                                                 \
  template void rmsnorm_backward<T>(Handle&, int64_t, int64_t, const T*, const T*, const float*,            \
                                    const float*, T*, float*);                                              \
  template void layernorm_backward<T>(Handle&, int64_t, int64_t, const T*, const T*, const float*,          \
                                      const float*, T*, float*, float*);                                    \
  template void norm_apply<T>(int64_t, int64_t, const T*, const float*, const float*, T*, cudaStream_t);
PLEXUS_CUDA_KERNELS_NORM(float)
PLEXUS_CUDA_KERNELS_NORM(bfloat16)
#undef PLEXUS_CUDA_KERNELS_NORM

}  // namespace plexus::cuda_kernels

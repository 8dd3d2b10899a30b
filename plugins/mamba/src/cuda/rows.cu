// The padded chunk layout's copies and the deterministic column sums (kernels.hpp).
#include "cuda/device.cuh"
#include "cuda/kernels.hpp"

namespace plexus::mamba::cuda {
namespace {

__global__ void pack_kernel(int64_t batch, int64_t seq, int64_t padded_seq, int64_t cols, const float* src,
                            int64_t ld_src, float* dst, int64_t ld_dst) {
  const int64_t n = batch * padded_seq * cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t row = i / cols, c = i % cols;
    const int64_t b = row / padded_seq, t = row % padded_seq;
    dst[row * ld_dst + c] = t < seq ? src[(b * seq + t) * ld_src + c] : 0.0f;
  }
}

__global__ void unpack_kernel(int64_t batch, int64_t seq, int64_t padded_seq, int64_t cols, const float* src,
                              int64_t ld_src, float* dst, int64_t ld_dst) {
  const int64_t n = batch * seq * cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t row = i / cols, c = i % cols;
    const int64_t b = row / seq, t = row % seq;
    dst[row * ld_dst + c] = src[(b * padded_seq + t) * ld_src + c];
  }
}

// Pass 1: partial[blockIdx.y][c] = the sum of column c over one block of rows, in row order.
__global__ void column_partials_kernel(int64_t rows, int64_t cols, int64_t block_rows, const float* m,
                                       int64_t ld, float* partial) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * block_rows;
  const int64_t r1 = r0 + block_rows < rows ? r0 + block_rows : rows;
  float sum = 0.0f;
  for (int64_t r = r0; r < r1; ++r) sum += m[r * ld + c];
  partial[static_cast<int64_t>(blockIdx.y) * cols + c] = sum;
}

// Pass 2: out[c] += the partials of column c, in block order.
__global__ void column_finish_kernel(int64_t blocks, int64_t cols, const float* partial, float* out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (int64_t k = 0; k < blocks; ++k) sum += partial[k * cols + c];
  out[c] += sum;
}

unsigned column_grid(int64_t cols) {
  return static_cast<unsigned>((cols + kThreads - 1) / kThreads);
}

}  // namespace

void pack_rows(int64_t batch, int64_t seq, int64_t padded_seq, int64_t cols, const float* src, int64_t ld_src,
               float* dst, int64_t ld_dst, cudaStream_t stream) {
  const int64_t n = batch * padded_seq * cols;
  if (n == 0) return;
  pack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(batch, seq, padded_seq, cols, src, ld_src, dst, ld_dst);
  check_launch("mamba.mixer pack_rows");
}

void unpack_rows(int64_t batch, int64_t seq, int64_t padded_seq, int64_t cols, const float* src,
                 int64_t ld_src, float* dst, int64_t ld_dst, cudaStream_t stream) {
  const int64_t n = batch * seq * cols;
  if (n == 0) return;
  unpack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(batch, seq, padded_seq, cols, src, ld_src, dst,
                                                        ld_dst);
  check_launch("mamba.mixer unpack_rows");
}

int64_t column_partials(int64_t rows, int64_t cols) {
  return row_block_count(rows) * cols;
}

void column_sums_add(int64_t rows, int64_t cols, const float* m, int64_t ld, float* partial, float* out,
                     cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const int64_t blocks = row_block_count(rows);
  const dim3 grid(column_grid(cols), static_cast<unsigned>(blocks));
  column_partials_kernel<<<grid, kThreads, 0, stream>>>(rows, cols, rows_per_block(rows), m, ld, partial);
  check_launch("mamba.mixer column_sums_add (partials)");
  column_finish_kernel<<<column_grid(cols), kThreads, 0, stream>>>(blocks, cols, partial, out);
  check_launch("mamba.mixer column_sums_add (finish)");
}

}  // namespace plexus::mamba::cuda

// The causal depthwise convolution with its bias and SiLU, forward and backward (kernels.hpp;
// conv.hpp has the formulas, conv.cpp the CPU's loops, which these follow term for term):
//   v[t, c] = bias[c] + sum_{k < W} w[c, k] in[t - (W - 1) + k, c]   (zero before the sequence start)
//   out[t, c] = silu(v) = v sigmoid(v)
#include "cuda/device.cuh"
#include "cuda/kernels.hpp"

namespace plexus::mamba::cuda {
namespace {

// v of row r (token t = r % seq of its sequence), channel c: bias first, then the taps in order.
__device__ float convolve(int64_t seq, int64_t width, int64_t r, int64_t c, const float* in, int64_t ld_in,
                          const float* w, const float* bias) {
  const int64_t t = r % seq;
  float v = bias[c];
  for (int64_t k = width - 1 - t > 0 ? width - 1 - t : 0; k < width; ++k)
    v += w[c * width + k] * in[(r - (width - 1) + k) * ld_in + c];
  return v;
}

__global__ void forward_kernel(int64_t rows, int64_t seq, int64_t channels, int64_t width, const float* in,
                               int64_t ld_in, const float* w, const float* bias, float* out) {
  for (int64_t i = global_thread(); i < rows * channels; i += grid_threads()) {
    const int64_t r = i / channels, c = i % channels;
    const float v = convolve(seq, width, r, c, in, ld_in, w, bias);
    out[i] = v * sigmoid(v);
  }
}

// dv = dout silu'(v), silu'(v) = sigmoid(v) (1 + v (1 - sigmoid(v))), in place over dout.
__global__ void silu_grad_kernel(int64_t rows, int64_t seq, int64_t channels, int64_t width, const float* in,
                                 int64_t ld_in, const float* w, const float* bias, float* dv) {
  for (int64_t i = global_thread(); i < rows * channels; i += grid_threads()) {
    const int64_t r = i / channels, c = i % channels;
    const float v = convolve(seq, width, r, c, in, ld_in, w, bias);
    const float sg = sigmoid(v);
    dv[i] = dv[i] * sg * (1.0f + v * (1.0f - sg));
  }
}

// din[r] = sum over the taps k of w[c, k] dv[r + (W - 1) - k], for the readers within the
// sequence; the current-token tap W - 1 first (it always reads within the sequence).
__global__ void input_grad_kernel(int64_t rows, int64_t seq, int64_t channels, int64_t width, const float* w,
                                  const float* dv, float* din, int64_t ld_din) {
  for (int64_t i = global_thread(); i < rows * channels; i += grid_threads()) {
    const int64_t r = i / channels, c = i % channels, t = r % seq;
    float o = w[c * width + width - 1] * dv[i];
    for (int64_t k = 0; k < width - 1; ++k) {
      const int64_t reader = t + (width - 1) - k;
      if (reader >= seq) continue;
      o += w[c * width + k] * dv[(r + (width - 1) - k) * channels + c];
    }
    din[r * ld_din + c] = o;
  }
}

// Pass 1 of the weight and bias gradients: column j = k * channels + c of one block of rows
// (blockIdx.y), in row order: for a tap k < W, sum dv[r, c] in[r - (W - 1) + k, c] over the rows
// whose tap reads within the sequence; for k = W (the bias), sum dv[r, c].
__global__ void param_partials_kernel(int64_t rows, int64_t seq, int64_t channels, int64_t width,
                                      int64_t block_rows, const float* in, int64_t ld_in, const float* dv,
                                      float* partial) {
  const int64_t cols = (width + 1) * channels;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  const int64_t k = j / channels, c = j % channels;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * block_rows;
  const int64_t r1 = r0 + block_rows < rows ? r0 + block_rows : rows;
  float sum = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const float d = dv[r * channels + c];
    if (k == width) {
      sum += d;
    } else if (r % seq >= (width - 1) - k) {
      sum += d * in[(r - (width - 1) + k) * ld_in + c];
    }
  }
  partial[static_cast<int64_t>(blockIdx.y) * cols + j] = sum;
}

// Pass 2: each column's partials added in block order into dw[c, k] or dbias[c].
__global__ void param_finish_kernel(int64_t blocks, int64_t channels, int64_t width, const float* partial,
                                    float* dw, float* dbias) {
  const int64_t cols = (width + 1) * channels;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  const int64_t k = j / channels, c = j % channels;
  float sum = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) sum += partial[b * cols + j];
  if (k == width) {
    if (dbias != nullptr) dbias[c] += sum;
  } else if (dw != nullptr) {
    dw[c * width + k] += sum;
  }
}

}  // namespace

void conv_silu_forward(const ConvShape& s, const float* in, int64_t ld_in, const float* w, const float* bias,
                       float* out, cudaStream_t stream) {
  const int64_t rows = s.batch * s.seq, n = rows * s.channels;
  if (n == 0) return;
  forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(rows, s.seq, s.channels, s.width, in, ld_in, w, bias,
                                                         out);
  check_launch("mamba.mixer conv_silu_forward");
}

int64_t conv_partials(const ConvShape& s) {
  return row_block_count(s.batch * s.seq) * (s.width + 1) * s.channels;
}

void conv_silu_backward(const ConvShape& s, const float* in, int64_t ld_in, const float* w, const float* bias,
                        float* dv, float* din, int64_t ld_din, float* dw, float* dbias, float* partial,
                        cudaStream_t stream) {
  const int64_t rows = s.batch * s.seq, n = rows * s.channels;
  if (n == 0) return;
  silu_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(rows, s.seq, s.channels, s.width, in, ld_in, w,
                                                           bias, dv);
  check_launch("mamba.mixer conv_silu_backward (silu)");
  input_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(rows, s.seq, s.channels, s.width, w, dv, din,
                                                            ld_din);
  check_launch("mamba.mixer conv_silu_backward (input)");
  if (dw == nullptr && dbias == nullptr) return;
  const int64_t blocks = row_block_count(rows), cols = (s.width + 1) * s.channels;
  const auto col_blocks = static_cast<unsigned>((cols + kThreads - 1) / kThreads);
  param_partials_kernel<<<dim3(col_blocks, static_cast<unsigned>(blocks)), kThreads, 0, stream>>>(
      rows, s.seq, s.channels, s.width, rows_per_block(rows), in, ld_in, dv, partial);
  check_launch("mamba.mixer conv_silu_backward (weight partials)");
  param_finish_kernel<<<col_blocks, kThreads, 0, stream>>>(blocks, s.channels, s.width, partial, dw, dbias);
  check_launch("mamba.mixer conv_silu_backward (weight sums)");
}

}  // namespace plexus::mamba::cuda

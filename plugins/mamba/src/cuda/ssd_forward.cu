// The chunked SSD's forward kernels and the float64 cumulative decays (kernels.hpp): the
// elementwise steps of ssd_forward.cpp between its products, on the padded chunk layout (chunk k
// holds rows k Q .. k Q + Q - 1; padding rows have dt = x = B = C = 0, so they add nothing and
// cs stays constant across them: the CPU's shorter last chunk exactly).
#include "cuda/device.cuh"
#include "cuda/kernels.hpp"
#include "cuda/ssd_layout.cuh"

namespace plexus::mamba::cuda {
namespace {

// One thread per (head, chunk): cs = A (dt_0 + ... + dt_l), summed in float64 in token order
// (ssd_common.hpp's chunk_cumsum; a float product is exact in float64, so this is the CPU's sum
// bit for bit given the same dt and A).
__global__ void cumsum_kernel(ChunkDims d, const float* dt, const float* A, double* cs) {
  for (int64_t i = global_thread(); i < d.heads * d.K; i += grid_threads()) {
    const int64_t h = i / d.K, k = i % d.K;
    const double a = static_cast<double>(A[h]);
    double sum = 0;
    for (int64_t l = 0; l < d.Q; ++l) {
      const int64_t row = k * d.Q + l;
      sum += static_cast<double>(dt[row * d.heads + h]) * a;
      cs[h * d.rows + row] = sum;
    }
  }
}

// The CPU scales B by exp(cs_last - cs_s) dt_s before x^T (.); here x is scaled instead (the same
// product, one rounding elsewhere), so one [K Q, P] buffer serves every head of a group.
__global__ void decayed_inputs_kernel(ChunkDims d, int64_t h, const double* cs, const float* dt,
                                      const float* x, int64_t ld_x, float* xs) {
  for (int64_t i = global_thread(); i < d.rows * d.P; i += grid_threads()) {
    const int64_t row = i / d.P, p = i % d.P;
    const float factor = exp_of(cs_last(d, cs, h, row) - cs_at(d, cs, h, row)) * dt[row * d.heads + h];
    xs[i] = factor * x[row * ld_x + p];
  }
}

// One thread per (sequence, state element): the states entering its chunks, in chunk order.
__global__ void pass_states_kernel(ChunkDims d, int64_t batch, int64_t h, const double* cs,
                                   const float* local, float* states) {
  for (int64_t i = global_thread(); i < batch * d.PN; i += grid_threads()) {
    const int64_t b = i / d.PN, e = i % d.PN;
    float state = 0.0f;
    for (int64_t c = 0; c < d.chunks; ++c) {
      const int64_t k = b * d.chunks + c;
      states[k * d.PN + e] = state;
      if (c + 1 < d.chunks) {
        const float decay = exp_of(cs_at(d, cs, h, k * d.Q + d.Q - 1));
        state = local[k * d.PN + e] + decay * state;
      }
    }
  }
}

__global__ void scale_rows_kernel(ChunkDims d, int64_t h, const double* cs, float* y, int64_t ld_y) {
  for (int64_t i = global_thread(); i < d.rows * d.P; i += grid_threads()) {
    const int64_t row = i / d.P, p = i % d.P;
    y[row * ld_y + p] = exp_of(cs_at(d, cs, h, row)) * y[row * ld_y + p];
  }
}

__global__ void masked_decay_kernel(ChunkDims d, int64_t h, const double* cs, const float* dt,
                                    const float* cbt, float* mt) {
  const int64_t qq = d.Q * d.Q;
  for (int64_t i = global_thread(); i < d.K * qq; i += grid_threads()) {
    const int64_t k = i / qq, s = (i / d.Q) % d.Q, l = i % d.Q;
    const int64_t row_s = k * d.Q + s, row_l = k * d.Q + l;
    mt[i] = l >= s
                ? cbt[i] * exp_of(cs_at(d, cs, h, row_l) - cs_at(d, cs, h, row_s)) * dt[row_s * d.heads + h]
                : 0.0f;
  }
}

__global__ void skip_unpack_kernel(int64_t rows, int64_t seq, int64_t padded_seq, int64_t width, int64_t P,
                                   const float* y_padded, const float* x, int64_t ld_x, const float* D,
                                   float* y, int64_t ld_y) {
  for (int64_t i = global_thread(); i < rows * width; i += grid_threads()) {
    const int64_t r = i / width, col = i % width;
    const int64_t padded_row = (r / seq) * padded_seq + r % seq;
    y[r * ld_y + col] = y_padded[padded_row * ld_y + col] + D[col / P] * x[r * ld_x + col];
  }
}

}  // namespace

void chunk_cumsum(const SsdShape& s, const float* dt, const float* A, double* cs, cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.heads * d.K == 0) return;
  cumsum_kernel<<<blocks_for(d.heads * d.K), kThreads, 0, stream>>>(d, dt, A, cs);
  check_launch("mamba.mixer chunk_cumsum");
}

void decayed_inputs(const SsdShape& s, int64_t h, const double* cs, const float* dt, const float* x,
                    int64_t ld_x, float* xs, cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.rows * d.P == 0) return;
  decayed_inputs_kernel<<<blocks_for(d.rows * d.P), kThreads, 0, stream>>>(d, h, cs, dt, x, ld_x, xs);
  check_launch("mamba.mixer decayed_inputs");
}

void pass_states(const SsdShape& s, int64_t h, const double* cs, const float* local, float* states,
                 cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (s.batch * d.PN == 0) return;
  pass_states_kernel<<<blocks_for(s.batch * d.PN), kThreads, 0, stream>>>(d, s.batch, h, cs, local, states);
  check_launch("mamba.mixer pass_states");
}

void scale_rows_by_decay(const SsdShape& s, int64_t h, const double* cs, float* y, int64_t ld_y,
                         cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.rows * d.P == 0) return;
  scale_rows_kernel<<<blocks_for(d.rows * d.P), kThreads, 0, stream>>>(d, h, cs, y, ld_y);
  check_launch("mamba.mixer scale_rows_by_decay");
}

void masked_decay(const SsdShape& s, int64_t h, const double* cs, const float* dt, const float* cbt,
                  float* mt, cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.K * d.Q == 0) return;
  masked_decay_kernel<<<blocks_for(d.K * d.Q * d.Q), kThreads, 0, stream>>>(d, h, cs, dt, cbt, mt);
  check_launch("mamba.mixer masked_decay");
}

void skip_unpack(const SsdShape& s, const float* y_padded, const float* x, int64_t ld_x, const float* D,
                 float* y, int64_t ld_y, cudaStream_t stream) {
  const int64_t rows = s.batch * s.seq, width = s.heads * s.head_dim;
  if (rows * width == 0) return;
  skip_unpack_kernel<<<blocks_for(rows * width), kThreads, 0, stream>>>(
      rows, s.seq, s.chunks() * s.chunk, width, s.head_dim, y_padded, x, ld_x, D, y, ld_y);
  check_launch("mamba.mixer skip_unpack");
}

}  // namespace plexus::mamba::cuda

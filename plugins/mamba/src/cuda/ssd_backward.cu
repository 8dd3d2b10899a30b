// The chunked SSD's backward kernels (kernels.hpp): the elementwise steps and short scans of
// ssd_backward.cpp between its products, on the padded chunk layout of ssd_forward.cu. The
// formulas are at the top of ssd_backward.cpp; each kernel names the CPU function it follows.
// Every sum has a fixed order (a thread's loop, or block_sum over a block of kRowThreads), and
// the gradients of B and C shared by a group's heads are added head after head by kernels queued
// in that order: no atomics.
#include "cuda/device.cuh"
#include "cuda/kernels.hpp"
#include "cuda/ssd_layout.cuh"

namespace plexus::mamba::cuda {
namespace {

// chunk_state_grads' scaling: dys = exp(cs_l) dY_l.
__global__ void decayed_grads_kernel(ChunkDims d, int64_t h, const double* cs, const float* dy, int64_t ld_dy,
                                     float* dys) {
  for (int64_t i = global_thread(); i < d.rows * d.P; i += grid_threads()) {
    const int64_t row = i / d.P, p = i % d.P;
    dys[i] = exp_of(cs_at(d, cs, h, row)) * dy[row * ld_dy + p];
  }
}

// ssd_backward's B2: one thread per (sequence, state element), the chunks in reverse.
__global__ void pass_state_grads_kernel(ChunkDims d, int64_t batch, int64_t h, const double* cs,
                                        const float* local, float* dleave) {
  for (int64_t i = global_thread(); i < batch * d.PN; i += grid_threads()) {
    const int64_t b = i / d.PN, e = i % d.PN;
    float grad = 0.0f;
    for (int64_t c = d.chunks - 1; c >= 0; --c) {
      const int64_t k = b * d.chunks + c;
      dleave[k * d.PN + e] = grad;
      if (c > 0) {
        const float decay = exp_of(cs_at(d, cs, h, k * d.Q + d.Q - 1));
        grad = local[k * d.PN + e] + decay * grad;
      }
    }
  }
}

// within_chunk_terms: one block per row s of a chunk's [Q, Q] matrices, its threads over l.
__global__ void within_chunk_kernel(ChunkDims d, int64_t h, const double* cs, const float* dt,
                                    const float* cbt, float* dmt, float* mt, float* dcbt, bool first,
                                    float* ddt_w) {
  const int64_t row_s = blockIdx.x;  // k Q + s
  const int64_t k = row_s / d.Q, s = row_s % d.Q;
  const double base = cs_at(d, cs, h, row_s);
  const float scale = dt[row_s * d.heads + h];
  const float* cb = cbt + row_s * d.Q;
  float* dm = dmt + row_s * d.Q;
  float* m = mt + row_s * d.Q;
  float* dcb = dcbt + row_s * d.Q;
  float sum = 0.0f;
  for (int64_t l = threadIdx.x; l < d.Q; l += kRowThreads) {
    if (l < s) {
      m[l] = 0.0f;
      dm[l] = 0.0f;
      if (first) dcb[l] = 0.0f;
      continue;
    }
    const float decay = exp_of(cs_at(d, cs, h, k * d.Q + l) - base);
    const float e = dm[l] * cb[l] * decay;
    const float g = dm[l] * decay * scale;
    sum += e;
    dcb[l] = first ? g : dcb[l] + g;
    m[l] = cb[l] * decay * scale;
    dm[l] = e * scale;
  }
  const float total = block_sum<kRowThreads>(sum);
  if (threadIdx.x == 0) ddt_w[row_s] = total;
}

// spanning_sums: one block per chunk; its threads own the columns l (acc[l] = sum_{s < k'} t[s][l]
// for the l >= k' still needed), and each k' is one block_sum over l >= k'.
__global__ void spanning_sums_kernel(ChunkDims d, const float* t, float* acc, float* da) {
  const int64_t k = blockIdx.x;
  const float* tk = t + k * d.Q * d.Q;
  float* a = acc + k * d.Q;
  float* out = da + k * d.Q;
  for (int64_t l = threadIdx.x; l < d.Q; l += kRowThreads) a[l] = 0.0f;
  if (threadIdx.x == 0) out[0] = 0.0f;
  for (int64_t kk = 1; kk < d.Q; ++kk) {
    const float* row = tk + (kk - 1) * d.Q;
    float sum = 0.0f;
    for (int64_t l = threadIdx.x; l < d.Q; l += kRowThreads) {
      if (l < kk) continue;
      a[l] += row[l];  // only this thread touches a[l]
      sum += a[l];
    }
    const float total = block_sum<kRowThreads>(sum);
    if (threadIdx.x == 0) out[kk] = total;
  }
}

// scale_dot_add for the entering state: one block per padded row over its N values.
__global__ void state_in_kernel(ChunkDims d, int64_t h, const double* cs, float* qn, const float* C,
                                int64_t ld_c, float* dots, float* dC, int64_t ld_dc) {
  const int64_t row = blockIdx.x;
  const float f = exp_of(cs_at(d, cs, h, row));
  float* q = qn + row * d.N;
  float sum = 0.0f;
  for (int64_t n = threadIdx.x; n < d.N; n += kRowThreads) {
    const float v = q[n] * f;
    q[n] = v;
    sum += v * C[row * ld_c + n];
    dC[row * ld_dc + n] += v;
  }
  const float total = block_sum<kRowThreads>(sum);
  if (threadIdx.x == 0) dots[row] = total;
}

// scale_dot_add for the leaving state, and bs = w_s dt_s B_s (scale_rows): one block per row.
__global__ void state_out_kernel(ChunkDims d, int64_t h, const double* cs, const float* dt, float* qn,
                                 const float* B, int64_t ld_b, float* dots, float* dB, int64_t ld_db,
                                 float* bs) {
  const int64_t row = blockIdx.x;
  const float w = exp_of(cs_last(d, cs, h, row) - cs_at(d, cs, h, row));
  const float dts = dt[row * d.heads + h];
  const float wdt = w * dts;
  float* q = qn + row * d.N;
  float sum = 0.0f;
  for (int64_t n = threadIdx.x; n < d.N; n += kRowThreads) {
    const float v = q[n] * w;
    q[n] = v;
    sum += v * B[row * ld_b + n];
    dB[row * ld_db + n] += dts * v;
    bs[row * d.N + n] = wdt * B[row * ld_b + n];
  }
  const float total = block_sum<kRowThreads>(sum);
  if (threadIdx.x == 0) dots[row] = total;
}

// <a[k], b[k]> over a chunk's state: one block per chunk.
__global__ void state_dots_kernel(ChunkDims d, const float* a, const float* b, float* out) {
  const int64_t k = blockIdx.x;
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < d.PN; e += kRowThreads) sum += a[k * d.PN + e] * b[k * d.PN + e];
  const float total = block_sum<kRowThreads>(sum);
  if (threadIdx.x == 0) out[k] = total;
}

// add_skip_grad: one block per chunk over its Q x P values of head h.
__global__ void skip_grads_kernel(ChunkDims d, int64_t h, const float* D, const float* x, int64_t ld_x,
                                  const float* dy, int64_t ld_dy, float* dx, int64_t ld_dx, float* dd) {
  const int64_t k = blockIdx.x;
  const float skip = D[h];
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < d.Q * d.P; e += kRowThreads) {
    const int64_t row = k * d.Q + e / d.P, p = e % d.P;
    const float g = dy[row * ld_dy + p];
    sum += x[row * ld_x + p] * g;
    dx[row * ld_dx + p] += skip * g;
  }
  const float total = block_sum<kRowThreads>(sum);
  if (threadIdx.x == 0) dd[k] = total;
}

// The end of chunk_backward for one head: one thread per chunk, its tokens in the CPU's order.
__global__ void combine_kernel(ChunkDims d, int64_t h, const double* cs, const float* dt, const float* A,
                               float* da, const float* dots_in, const float* dots_out, const float* carry,
                               float* ddt_w, float* ddt, float* da_sum) {
  for (int64_t k = global_thread(); k < d.K; k += grid_threads()) {
    const int64_t b = k / d.chunks, c = k % d.chunks;
    const int64_t q = d.seq - c * d.Q < d.Q ? d.seq - c * d.Q : d.Q;  // the chunk's real tokens
    const bool has_in = c > 0, has_out = c + 1 < d.chunks;
    const int64_t base = k * d.Q;
    if (has_in) {  // state to output: da_k += sum_{l >= k} dots_in[l]
      float run = 0.0f;
      for (int64_t kk = q - 1; kk >= 0; --kk) {
        run += dots_in[base + kk];
        da[base + kk] += run;
      }
    }
    if (has_out) {  // the chunk's state
      const float entering = has_in ? exp_of(cs_at(d, cs, h, base + q - 1)) * carry[k] : 0.0f;
      float run = 0.0f;
      for (int64_t kk = 0; kk < q; ++kk) {
        da[base + kk] += run + entering;
        run += dots_out[base + kk] * dt[(base + kk) * d.heads + h];
        ddt_w[base + kk] += dots_out[base + kk];
      }
    }
    const float a = A[h];
    float sum = 0.0f;
    for (int64_t kk = 0; kk < q; ++kk) {
      const int64_t token = b * d.seq + c * d.Q + kk;
      ddt[token * d.heads + h] = ddt_w[base + kk] + a * da[base + kk];
      sum += dt[(base + kk) * d.heads + h] * da[base + kk];
    }
    da_sum[k] = sum;
  }
}

__global__ void head_sums_kernel(ChunkDims d, const float* da_sums, const float* dd_sums, float* dA,
                                 float* dD) {
  for (int64_t h = global_thread(); h < d.heads; h += grid_threads()) {
    float a = 0.0f, dd = 0.0f;
    for (int64_t k = 0; k < d.K; ++k) {
      a += da_sums[h * d.K + k];
      dd += dd_sums[h * d.K + k];
    }
    dA[h] = a;
    dD[h] = dd;
  }
}

}  // namespace

void decayed_grads(const SsdShape& s, int64_t h, const double* cs, const float* dy, int64_t ld_dy, float* dys,
                   cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.rows * d.P == 0) return;
  decayed_grads_kernel<<<blocks_for(d.rows * d.P), kThreads, 0, stream>>>(d, h, cs, dy, ld_dy, dys);
  check_launch("mamba.mixer decayed_grads");
}

void pass_state_grads(const SsdShape& s, int64_t h, const double* cs, const float* local, float* dleave,
                      cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (s.batch * d.PN == 0) return;
  pass_state_grads_kernel<<<blocks_for(s.batch * d.PN), kThreads, 0, stream>>>(d, s.batch, h, cs, local,
                                                                               dleave);
  check_launch("mamba.mixer pass_state_grads");
}

void within_chunk_terms(const SsdShape& s, int64_t h, const double* cs, const float* dt, const float* cbt,
                        float* dmt, float* mt, float* dcbt, bool first, float* ddt_w, cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.rows == 0) return;
  within_chunk_kernel<<<row_blocks(d.rows), kRowThreads, 0, stream>>>(d, h, cs, dt, cbt, dmt, mt, dcbt, first,
                                                                      ddt_w);
  check_launch("mamba.mixer within_chunk_terms");
}

void spanning_sums(const SsdShape& s, const float* t, float* acc, float* da, cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.K == 0) return;
  spanning_sums_kernel<<<row_blocks(d.K), kRowThreads, 0, stream>>>(d, t, acc, da);
  check_launch("mamba.mixer spanning_sums");
}

void state_in_terms(const SsdShape& s, int64_t h, const double* cs, float* qn, const float* C, int64_t ld_c,
                    float* dots, float* dC, int64_t ld_dc, cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.rows == 0) return;
  state_in_kernel<<<row_blocks(d.rows), kRowThreads, 0, stream>>>(d, h, cs, qn, C, ld_c, dots, dC, ld_dc);
  check_launch("mamba.mixer state_in_terms");
}

void state_out_terms(const SsdShape& s, int64_t h, const double* cs, const float* dt, float* qn,
                     const float* B, int64_t ld_b, float* dots, float* dB, int64_t ld_db, float* bs,
                     cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.rows == 0) return;
  state_out_kernel<<<row_blocks(d.rows), kRowThreads, 0, stream>>>(d, h, cs, dt, qn, B, ld_b, dots, dB, ld_db,
                                                                   bs);
  check_launch("mamba.mixer state_out_terms");
}

void state_dots(const SsdShape& s, const float* a, const float* b, float* out, cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.K == 0) return;
  state_dots_kernel<<<row_blocks(d.K), kRowThreads, 0, stream>>>(d, a, b, out);
  check_launch("mamba.mixer state_dots");
}

void skip_grads(const SsdShape& s, int64_t h, const float* D, const float* x, int64_t ld_x, const float* dy,
                int64_t ld_dy, float* dx, int64_t ld_dx, float* dd, cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.K == 0) return;
  skip_grads_kernel<<<row_blocks(d.K), kRowThreads, 0, stream>>>(d, h, D, x, ld_x, dy, ld_dy, dx, ld_dx, dd);
  check_launch("mamba.mixer skip_grads");
}

void combine_head(const SsdShape& s, int64_t h, const double* cs, const float* dt, const float* A, float* da,
                  const float* dots_in, const float* dots_out, const float* carry, float* ddt_w, float* ddt,
                  float* da_sum, cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.K == 0) return;
  combine_kernel<<<blocks_for(d.K), kThreads, 0, stream>>>(d, h, cs, dt, A, da, dots_in, dots_out, carry,
                                                           ddt_w, ddt, da_sum);
  check_launch("mamba.mixer combine_head");
}

void head_sums(const SsdShape& s, const float* da_sums, const float* dd_sums, float* dA, float* dD,
               cudaStream_t stream) {
  const ChunkDims d = ChunkDims::of(s);
  if (d.heads == 0) return;
  head_sums_kernel<<<blocks_for(d.heads), kThreads, 0, stream>>>(d, da_sums, dd_sums, dA, dD);
  check_launch("mamba.mixer head_sums");
}

}  // namespace plexus::mamba::cuda

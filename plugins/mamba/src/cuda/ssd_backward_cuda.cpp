// The chunked SSD's backward on the GPU (ssd_cuda.hpp), step for step ssd_backward.cpp (its
// comment has the formulas): per head, the gradient of every chunk's leaving state (B1, passed
// back from chunk to chunk: B2), then every chunk's dx, the da terms and ddt (B3); per group, the
// gradients of B and C summed over the group's heads in head order, then through C B^T.
#include <cuda_runtime_api.h>

#include "cuda/kernels.hpp"
#include "cuda/ssd_cuda.hpp"
#include "cuda/ssd_padding.hpp"
#include "plexus_cuda_kernels/error.hpp"
#include "plexus_cuda_kernels/gemm.hpp"

namespace plexus::mamba::cuda {

namespace ck = plexus::cuda_kernels;
using ck::Trans;

namespace {

// The temporaries of one backward: the chunk matrices [K, Q, Q], per-row vectors [K Q], per-chunk
// states [K, P, N] and the per-(head, chunk) sums of dA and dD [H, K].
struct Work {
  float *cbt, *dcbt, *dmt, *mt;
  float *dys, *qn, *bs;
  float *local, *dleave;
  float *ddt_w, *da, *acc, *dots_in, *dots_out, *carry;
  float *da_sums, *dd_sums;

  Work(const SsdShape& s, const PaddedScan& scan, Call& call) {
    const int64_t K = scan.K, QQ = scan.Q * scan.Q, rows = scan.rows, PN = s.head_dim * s.state_dim;
    cbt = call.take(K * QQ);
    dcbt = call.take(K * QQ);
    dmt = call.take(K * QQ);
    mt = call.take(K * QQ);
    dys = call.take(rows * s.head_dim);
    qn = call.take(rows * s.state_dim);
    bs = call.take(rows * s.state_dim);
    local = call.take(K * PN);
    dleave = call.take(K * PN);
    ddt_w = call.take(rows);
    da = call.take(rows);
    acc = call.take(rows);
    dots_in = call.take(rows);
    dots_out = call.take(rows);
    carry = call.take(K);
    da_sums = call.take(s.heads * K);
    dd_sums = call.take(s.heads * K);
  }
};

}  // namespace

void ssd_backward(const SsdShape& s, const SsdTensors& in, const float* states, const float* dy,
                  int64_t ld_dy, float* dxbc, float* ddt, float* dA, float* dD, Call& call) {
  const int64_t H = s.heads, P = s.head_dim, N = s.state_dim, G = s.groups, hpg = s.heads_per_group();
  if (s.batch * s.seq == 0) {
    PLEXUS_CUDA_CHECK(cudaMemsetAsync(dA, 0, static_cast<std::size_t>(H) * sizeof(float), call.stream),
                      "mamba.mixer ssd_backward");
    PLEXUS_CUDA_CHECK(cudaMemsetAsync(dD, 0, static_cast<std::size_t>(H) * sizeof(float), call.stream),
                      "mamba.mixer ssd_backward");
    return;
  }
  const int64_t ld = in.ld, PN = P * N;
  const PaddedScan scan = PaddedScan::of(s, in, call);
  const int64_t Q = scan.Q, K = scan.K, QQ = Q * Q;
  ck::Handle& handle = call.handle;
  cudaStream_t stream = call.stream;

  const float* dy_padded = scan.pad(s, dy, ld_dy, call);
  // dx is written by its first product; dB and dC are sums over heads: all start at zero.
  float* d_padded = scan.padded ? call.take(scan.rows * ld) : dxbc;
  PLEXUS_CUDA_CHECK(
      cudaMemsetAsync(d_padded, 0, static_cast<std::size_t>(scan.rows * ld) * sizeof(float), stream),
      "mamba.mixer ssd_backward");
  double* cs = call.take<double>(H * scan.rows);
  chunk_cumsum(s, scan.dt, in.A, cs, stream);
  Work w(s, scan, call);

  for (int64_t g = 0; g < G; ++g) {
    const float* B = scan.xbc + H * P + g * N;
    const float* C = scan.xbc + H * P + G * N + g * N;
    float* dB = d_padded + H * P + g * N;
    float* dC = d_padded + H * P + G * N + g * N;
    ck::gemm_strided_batched<float, float>(handle, Trans::N, Trans::T, Q, Q, N, 1.0f, B, ld, Q * ld, C, ld,
                                           Q * ld, 0.0f, w.cbt, Q, QQ, K);
    for (int64_t j = 0; j < hpg; ++j) {
      const int64_t h = g * hpg + j;
      const float* x = scan.xbc + h * P;
      const float* dyh = dy_padded + h * P;
      float* dx = d_padded + h * P;
      const float* s_in = states + h * K * PN;

      // B1, B2. dleave[k]: the gradient of the state leaving chunk k; chunk k's share of the one
      // before it is local[k] = sum_l exp(cs_l) dY_l C_l^T.
      decayed_grads(s, h, cs, dyh, ld_dy, w.dys, stream);
      ck::gemm_strided_batched<float, float>(handle, Trans::T, Trans::N, P, N, Q, 1.0f, w.dys, P, Q * P, C,
                                             ld, Q * ld, 0.0f, w.local, N, PN, K);
      pass_state_grads(s, h, cs, w.local, w.dleave, stream);

      // B3, within the chunk: dmt[s][l] = x_s . dY_l, the terms, dx = mt dY, the spanning sums.
      ck::gemm_strided_batched<float, float>(handle, Trans::N, Trans::T, Q, Q, P, 1.0f, x, ld, Q * ld, dyh,
                                             ld_dy, Q * ld_dy, 0.0f, w.dmt, Q, QQ, K);
      within_chunk_terms(s, h, cs, scan.dt, w.cbt, w.dmt, w.mt, w.dcbt, j == 0, w.ddt_w, stream);
      ck::gemm_strided_batched<float, float>(handle, Trans::N, Trans::N, Q, P, Q, 1.0f, w.mt, Q, QQ, dyh,
                                             ld_dy, Q * ld_dy, 0.0f, dx, ld, Q * ld, K);
      spanning_sums(s, w.dmt, w.acc, w.da, stream);

      // The entering state to the output: qn = dY S_in (zero in a first chunk).
      ck::gemm_strided_batched<float, float>(handle, Trans::N, Trans::N, Q, N, P, 1.0f, dyh, ld_dy, Q * ld_dy,
                                             s_in, N, PN, 0.0f, w.qn, N, Q * N, K);
      state_in_terms(s, h, cs, w.qn, C, ld, w.dots_in, dC, ld, stream);

      // The chunk's leaving state: qn = x dS, then dx += (w dt B) dS^T (zero in a last chunk).
      ck::gemm_strided_batched<float, float>(handle, Trans::N, Trans::N, Q, N, P, 1.0f, x, ld, Q * ld,
                                             w.dleave, N, PN, 0.0f, w.qn, N, Q * N, K);
      state_out_terms(s, h, cs, scan.dt, w.qn, B, ld, w.dots_out, dB, ld, w.bs, stream);
      ck::gemm_strided_batched<float, float>(handle, Trans::N, Trans::T, Q, P, N, 1.0f, w.bs, N, Q * N,
                                             w.dleave, N, PN, 1.0f, dx, ld, Q * ld, K);
      state_dots(s, w.dleave, s_in, w.carry, stream);

      // The skip, then da and ddt of every token, and the chunk's shares of dA and dD.
      skip_grads(s, h, in.D, x, ld, dyh, ld_dy, dx, ld, w.dd_sums + h * K, stream);
      combine_head(s, h, cs, scan.dt, in.A, w.da, w.dots_in, w.dots_out, w.carry, w.ddt_w, ddt,
                   w.da_sums + h * K, stream);
    }
    // dC_l += sum_s dcbt[s][l] B_s, dB_s += sum_l dcbt[s][l] C_l (dcbt summed over the group's heads).
    ck::gemm_strided_batched<float, float>(handle, Trans::T, Trans::N, Q, N, Q, 1.0f, w.dcbt, Q, QQ, B, ld,
                                           Q * ld, 1.0f, dC, ld, Q * ld, K);
    ck::gemm_strided_batched<float, float>(handle, Trans::N, Trans::N, Q, N, Q, 1.0f, w.dcbt, Q, QQ, C, ld,
                                           Q * ld, 1.0f, dB, ld, Q * ld, K);
  }
  head_sums(s, w.da_sums, w.dd_sums, dA, dD, stream);
  if (scan.padded) unpack_rows(s.batch, s.seq, scan.padded_seq, ld, d_padded, ld, dxbc, ld, stream);
}

}  // namespace plexus::mamba::cuda

// The chunked SSD's forward on the GPU (ssd_cuda.hpp), step for step ssd_forward.cpp: per group
// C B^T; per head of the group the chunk states, the passing of states from chunk to chunk, the
// states' output and the within-chunk output; the skip D x last.
#include "cuda/kernels.hpp"
#include "cuda/ssd_cuda.hpp"
#include "cuda/ssd_padding.hpp"
#include "plexus_cuda_kernels/gemm.hpp"

namespace plexus::mamba::cuda {

namespace ck = plexus::cuda_kernels;
using ck::Trans;

void ssd_forward(const SsdShape& s, const SsdTensors& in, float* y, int64_t ld_y, float* states, Call& call) {
  if (s.batch * s.seq == 0) return;
  const int64_t H = s.heads, P = s.head_dim, N = s.state_dim, G = s.groups, hpg = s.heads_per_group();
  const int64_t ld = in.ld, PN = P * N;
  const PaddedScan scan = PaddedScan::of(s, in, call);
  const int64_t Q = scan.Q, K = scan.K, QQ = Q * Q;
  ck::Handle& handle = call.handle;
  cudaStream_t stream = call.stream;

  float* y_padded = scan.padded ? call.take(scan.rows * ld_y) : y;
  double* cs = call.take<double>(H * scan.rows);
  chunk_cumsum(s, scan.dt, in.A, cs, stream);
  float* cbt = call.take(K * QQ);
  float* mt = call.take(K * QQ);
  float* xs = call.take(scan.rows * P);
  float* local = call.take(K * PN);

  for (int64_t g = 0; g < G; ++g) {
    const float* B = scan.xbc + H * P + g * N;
    const float* C = scan.xbc + H * P + G * N + g * N;
    // cbt[k][s][l] = B_s . C_l
    ck::gemm_strided_batched<float, float>(handle, Trans::N, Trans::T, Q, Q, N, 1.0f, B, ld, Q * ld, C, ld,
                                           Q * ld, 0.0f, cbt, Q, QQ, K);
    for (int64_t j = 0; j < hpg; ++j) {
      const int64_t h = g * hpg + j;
      const float* x = scan.xbc + h * P;
      float* yh = y_padded + h * P;
      float* states_h = states + h * K * PN;
      // 1. Each chunk's own leaving state, local[k] = sum_s exp(cs_last - cs_s) dt_s x_s B_s^T.
      if (s.chunks() > 1) {
        decayed_inputs(s, h, cs, scan.dt, x, ld, xs, stream);
        ck::gemm_strided_batched<float, float>(handle, Trans::T, Trans::N, P, N, Q, 1.0f, xs, P, Q * P, B, ld,
                                               Q * ld, 0.0f, local, N, PN, K);
      }
      // 2. The states entering the chunks.
      pass_states(s, h, cs, local, states_h, stream);
      // 3. The output: exp(cs_l) S_in C_l (zero in a first chunk), then the within-chunk part.
      ck::gemm_strided_batched<float, float>(handle, Trans::N, Trans::T, Q, P, N, 1.0f, C, ld, Q * ld,
                                             states_h, N, PN, 0.0f, yh, ld_y, Q * ld_y, K);
      scale_rows_by_decay(s, h, cs, yh, ld_y, stream);
      masked_decay(s, h, cs, scan.dt, cbt, mt, stream);
      ck::gemm_strided_batched<float, float>(handle, Trans::T, Trans::N, Q, P, Q, 1.0f, mt, Q, QQ, x, ld,
                                             Q * ld, 1.0f, yh, ld_y, Q * ld_y, K);
    }
  }
  // y = (unpadded) y + D x, on the caller's rows.
  skip_unpack(s, y_padded, in.xbc, ld, in.D, y, ld_y, stream);
}

}  // namespace plexus::mamba::cuda

// The layer's own CUDA kernels (the .cu files of this folder), each the GPU form of a step of the
// CPU path, declared in plain C++ (device pointers, sizes, a stream) so the host code calls them
// from .cpp files. Everything is float32 (the chunk decays' cumulative sums float64, as on the
// CPU). Gradients are written or accumulated without atomics: every sum has a fixed order, so
// results are identical run after run. Each launch is checked; a failure throws
// plexus_cuda_kernels' CudaError naming the kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "conv.hpp"
#include "gated_norm.hpp"
#include "ssd.hpp"

namespace plexus::mamba::cuda {

// ---- rows: the padded chunk layout, deterministic column sums (rows.cu) ----

// The SSD works on sequences padded to whole chunks (padded_seq = chunks * chunk tokens per
// sequence): token t of sequence b is row b * padded_seq + t; the padding rows are zero, which
// is the CPU's shorter last chunk exactly (a token with dt = 0, x = B = C = 0 adds nothing).
// pack: dst [batch * padded_seq, cols] from src [batch * seq, cols]; unpack: the reverse (the
// padding rows dropped). Row strides ld_src, ld_dst.
void pack_rows(int64_t batch, int64_t seq, int64_t padded_seq, int64_t cols, const float* src, int64_t ld_src,
               float* dst, int64_t ld_dst, cudaStream_t stream);
void unpack_rows(int64_t batch, int64_t seq, int64_t padded_seq, int64_t cols, const float* src,
                 int64_t ld_src, float* dst, int64_t ld_dst, cudaStream_t stream);

// out[c] += sum over the rows of m[r * ld + c], deterministically: partial sums over fixed
// blocks of rows (chosen from `rows` alone) into `partial`, then added in block order.
// `partial` holds column_partials(rows, cols) floats.
int64_t column_partials(int64_t rows, int64_t cols);
void column_sums_add(int64_t rows, int64_t cols, const float* m, int64_t ld, float* partial, float* out,
                     cudaStream_t stream);

// ---- the causal convolution with SiLU (conv.cu; conv.hpp's formulas) ----

// out [rows, channels] written.
void conv_silu_forward(const ConvShape& shape, const float* in, int64_t ld_in, const float* w,
                       const float* bias, float* out, cudaStream_t stream);
// dv: on entry the gradient of out [rows, channels], on return v's gradient dout silu'(v) (v
// recomputed). din [rows, ld_din] written; dw [channels, width] and dbias [channels] accumulated
// (either may be null). `partial` holds conv_partials(shape) floats.
int64_t conv_partials(const ConvShape& shape);
void conv_silu_backward(const ConvShape& shape, const float* in, int64_t ld_in, const float* w,
                        const float* bias, float* dv, float* din, int64_t ld_din, float* dw, float* dbias,
                        float* partial, cudaStream_t stream);

// ---- per head: dt and A (heads.cu; dt.hpp's formulas) ----

// dt [rows, heads] = softplus(raw + bias) (linear above 20).
void dt_forward(int64_t rows, int64_t heads, const float* raw, int64_t ld_raw, const float* bias, float* dt,
                cudaStream_t stream);
// d_raw [rows, ld_draw] = ddt softplus'(raw + bias), written (its column sums are dt_bias's
// gradient: column_sums_add).
void dt_backward(int64_t rows, int64_t heads, const float* raw, int64_t ld_raw, const float* bias,
                 const float* ddt, float* d_raw, int64_t ld_draw, cudaStream_t stream);
// A [heads] = -exp(A_log).
void decay_rates(int64_t heads, const float* a_log, float* A, cudaStream_t stream);
// grad_d[h] += dD[h]; grad_a_log[h] += dA[h] A[h] (A = -exp(A_log)); either gradient may be null.
void add_head_grads(int64_t heads, const float* dA, const float* dD, const float* A, float* grad_a_log,
                    float* grad_d, cudaStream_t stream);

// ---- the gate and grouped RMSNorm (gated_norm.cu; gated_norm.hpp's formulas) ----

// o [rows, width] written. rstd_in given: that 1/rms (the forward's again, for backward);
// otherwise computed, and written to rstd_out [rows, groups] when that is not null.
void gated_norm_forward(const GatedNormShape& shape, const float* y, const float* z, int64_t ld_z,
                        const float* w, const float* rstd_in, float* o, float* rstd_out, cudaStream_t stream);
// dy [rows, width] and dz [rows, ld_dz] written; dw_terms [rows, width] (may be null) gets each
// row's share of the weight gradient, d_out g rstd, whose column sums are that gradient.
void gated_norm_backward(const GatedNormShape& shape, const float* d_out, const float* y, const float* z,
                         int64_t ld_z, const float* rstd, const float* w, float* dy, float* dz, int64_t ld_dz,
                         float* dw_terms, cudaStream_t stream);

// ---- the chunked SSD (ssd_forward.cu, ssd_backward.cu; ssd_forward.cpp's and ssd_backward.cpp's
// decomposition on the padded layout) ----
//
// Sizes: Q = shape.chunk, K = batch * chunks (chunk k = b * chunks + c), padded rows K Q (row
// k Q + l is token l of chunk k). dt is [K Q, heads]; cs [heads, K Q] float64 (cs[h][k Q + l] =
// A_h (dt_0 + ... + dt_l) within chunk k); the states and their gradients of one head are
// [K, P, N]; the within-chunk matrices [K, Q, Q]. Kernels named for one head take h and read
// x, B, C, dy, dx, dB, dC through pointers already offset to that head's or group's columns.

void chunk_cumsum(const SsdShape& s, const float* dt, const float* A, double* cs, cudaStream_t stream);

// Forward.
// xs [K Q, P] = exp(cs_last - cs_s) dt_s x_s: the inputs as they reach the state leaving the chunk.
void decayed_inputs(const SsdShape& s, int64_t h, const double* cs, const float* dt, const float* x,
                    int64_t ld_x, float* xs, cudaStream_t stream);
// states[k] = the state entering chunk k (zero for every sequence's first chunk), from each
// chunk's own leaving state local[k]: S_{c+1} = exp(cs_last of c) S_c + local[c].
void pass_states(const SsdShape& s, int64_t h, const double* cs, const float* local, float* states,
                 cudaStream_t stream);
// y[l][:] *= exp(cs_l): the entering state's decay to each token (P columns).
void scale_rows_by_decay(const SsdShape& s, int64_t h, const double* cs, float* y, int64_t ld_y,
                         cudaStream_t stream);
// mt[k][s][l] = cbt[k][s][l] exp(cs_l - cs_s) dt_s for l >= s, 0 below: the transposed
// within-chunk matrix.
void masked_decay(const SsdShape& s, int64_t h, const double* cs, const float* dt, const float* cbt,
                  float* mt, cudaStream_t stream);
// y [batch * seq, ld_y] = y_padded (unpadded) + D x: the skip, per head's columns.
void skip_unpack(const SsdShape& s, const float* y_padded, const float* x, int64_t ld_x, const float* D,
                 float* y, int64_t ld_y, cudaStream_t stream);

// Backward.
// dys [K Q, P] = exp(cs_l) dy_l.
void decayed_grads(const SsdShape& s, int64_t h, const double* cs, const float* dy, int64_t ld_dy, float* dys,
                   cudaStream_t stream);
// dleave[k] = the gradient of the state leaving chunk k (zero for every sequence's last chunk),
// from each chunk's share local[k] = sum_l exp(cs_l) dY_l C_l^T: dS_{c-1} = local[c] + exp(cs_last
// of c) dS_c.
void pass_state_grads(const SsdShape& s, int64_t h, const double* cs, const float* local, float* dleave,
                      cudaStream_t stream);
// ssd_backward.cpp's within_chunk_terms on every chunk: from cbt and dmt (x_s . dY_l) writes mt,
// dcbt (first head of the group; added by the others), dmt <- the da terms, ddt_w[k Q + s].
void within_chunk_terms(const SsdShape& s, int64_t h, const double* cs, const float* dt, const float* cbt,
                        float* dmt, float* mt, float* dcbt, bool first, float* ddt_w, cudaStream_t stream);
// da[k Q + k'] = sum over s < k' <= l of t[k][s][l]; acc [K Q] is scratch.
void spanning_sums(const SsdShape& s, const float* t, float* acc, float* da, cudaStream_t stream);
// The entering state's output terms: qn[row] *= exp(cs_l); dots[row] = qn . C_l; dC_l += qn.
void state_in_terms(const SsdShape& s, int64_t h, const double* cs, float* qn, const float* C, int64_t ld_c,
                    float* dots, float* dC, int64_t ld_dc, cudaStream_t stream);
// The leaving state's terms, w_s = exp(cs_last - cs_s): qn[row] *= w_s; dots[row] = qn . B_s;
// dB_s += dt_s qn; bs[row] = w_s dt_s B_s.
void state_out_terms(const SsdShape& s, int64_t h, const double* cs, const float* dt, float* qn,
                     const float* B, int64_t ld_b, float* dots, float* dB, int64_t ld_db, float* bs,
                     cudaStream_t stream);
// out[k] = <a[k], b[k]> over the P N elements of chunk k's state.
void state_dots(const SsdShape& s, const float* a, const float* b, float* out, cudaStream_t stream);
// The skip's gradient: dx += D_h dy; dd[k] = sum over chunk k of x dy (dD's share).
void skip_grads(const SsdShape& s, int64_t h, const float* D, const float* x, int64_t ld_x, const float* dy,
                int64_t ld_dy, float* dx, int64_t ld_dx, float* dd, cudaStream_t stream);
// ssd_backward.cpp's end of a chunk for one head: the state terms added to da (in: the spanning
// sums) and ddt_w, then ddt [batch * seq, heads] (the real tokens) = ddt_w + A da and da_sum[k] =
// sum dt da (dA's share).
void combine_head(const SsdShape& s, int64_t h, const double* cs, const float* dt, const float* A, float* da,
                  const float* dots_in, const float* dots_out, const float* carry, float* ddt_w, float* ddt,
                  float* da_sum, cudaStream_t stream);
// dA[h] = sum over k of da_sums[h][k], dD[h] likewise (in chunk order).
void head_sums(const SsdShape& s, const float* da_sums, const float* dd_sums, float* dA, float* dD,
               cudaStream_t stream);

}  // namespace plexus::mamba::cuda

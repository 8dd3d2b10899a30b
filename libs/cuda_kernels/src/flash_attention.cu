// Fused causal grouped-query attention in bf16 on the tensor cores (see flash_attention.hpp for
// the method). One block of 4 warps per (tile, batch, head or group); every warp owns 16 rows of
// the tile (queries in the forward, keys in the backward) and holds its products in mma.sync's
// accumulator fragments, so the softmax runs on registers:
//   m16n8k16, thread (g = lane / 4, t = lane % 4): A holds rows g and g + 8, columns 2t, 2t + 1
//   (+ 8); B holds rows 2t, 2t + 1 (+ 8) of column g; C holds rows g and g + 8, columns 2t, 2t + 1.
// A C fragment pair is therefore already the A fragment of the next product (P V, P^T dO), and a
// row's maximum and sum need only the 4 threads of a quad.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "device_common.cuh"
#include "plexus_cuda_kernels/error.hpp"
#include "plexus_cuda_kernels/flash_attention.hpp"

namespace plexus::cuda_kernels {
namespace {

using namespace detail;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;  // 4 warps
constexpr int kTile = 64;      // queries per forward block, keys per backward block, keys per step
constexpr int kBwdQueries = 32;
constexpr int kPad = 8;  // bf16 per shared row beyond the data: fragment loads spread over all banks
constexpr float kLog2e = 1.4426950408889634f;

// What the kernels need of AttentionLayout, with the column arithmetic on the device.
struct Geometry {
  int64_t batch, seq, heads, per, ld, head_dim;
  int64_t q_offset, k_offset, v_offset, q_group_stride, kv_group_stride;
  float scale;       // 1 / sqrt(head_dim)
  float scale_log2;  // scale * log2(e): scores in base 2

  __device__ int64_t q_column(int64_t h) const {
    return q_offset + (h / per) * q_group_stride + (h % per) * head_dim;
  }
  __device__ int64_t k_column(int64_t g) const { return k_offset + g * kv_group_stride; }
  __device__ int64_t v_column(int64_t g) const { return v_offset + g * kv_group_stride; }
};

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return static_cast<uint32_t>(__bfloat16_as_ushort(v.x)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(v.y)) << 16);
}

// Two consecutive bf16 (an even offset) as one register.
__device__ __forceinline__ uint32_t load_pair(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// c += a b on the tensor cores (16x16 bf16 times 16x8 bf16, fp32 accumulators).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // flash_attention_supported refuses devices (and builds) without bf16 mma
#endif
}

// Four 8x8 bf16 matrices from shared memory, each transposed: lane l gives the address of row
// l % 8 of matrix l / 8, and receives, of matrix i in register i, the elements (2t, g) and
// (2t + 1, g) of the stored matrix: a B fragment (or an A fragment) of stored rows k, columns n.
__device__ __forceinline__ void load_matrices_transposed(uint32_t (&r)[4], const bf16* row_address) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// rows x HD bf16 from global memory (row stride ld) into shared rows of HD + kPad; rows at or
// past `valid` are zeros. 16-byte vectors.
template <int HD>
__device__ void load_tile(bf16* dst, const bf16* src, int64_t ld, int rows, int64_t valid) {
  constexpr int kVectors = HD / 8;
  for (int i = threadIdx.x; i < rows * kVectors; i += kThreads) {
    const int r = i / kVectors, c = (i % kVectors) * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + r * ld + c);
    *reinterpret_cast<uint4*>(dst + r * (HD + kPad) + c) = v;
  }
}

// The A fragment of rows [row, row + 16) and columns [col, col + 16) of a row-major shared tile.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int row_stride, int row, int col) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const bf16* p = tile + (row + g) * row_stride + col + 2 * t;
  a[0] = load_pair(p);
  a[1] = load_pair(p + 8 * row_stride);
  a[2] = load_pair(p + 8);
  a[3] = load_pair(p + 8 * row_stride + 8);
}

// Two accumulator tiles (columns [16k, 16k + 16) of a C fragment row pair) as an A fragment.
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// Sum or maximum over the 4 threads of a quad (the threads holding one accumulator row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// acc[n] += A (16 rows) x B where B's 16 rows (k) start at shared row `k_row` of `tile` and its
// columns are the tile's columns [8 n, 8 n + 8) for n in [0, N): B fragments through
// load_matrices_transposed, two n-tiles per load.
template <int N>
__device__ __forceinline__ void mma_row_major_b(float (&acc)[N][4], const uint32_t (&a)[4], const bf16* tile,
                                                int row_stride, int k_row, int first_column) {
  const int lane = threadIdx.x & 31, matrix = lane >> 3, r = lane & 7;
#pragma unroll
  for (int n = 0; n < N; n += 2) {
    uint32_t b[4];
    load_matrices_transposed(
        b, tile + (k_row + (matrix & 1) * 8 + r) * row_stride + first_column + (n + (matrix >> 1)) * 8);
    mma(acc[n], a, b[0], b[1]);
    mma(acc[n + 1], a, b[2], b[3]);
  }
}

// ---- forward -----------------------------------------------------------------------------------

template <int HD>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(Geometry geo, const bf16* qkv, bf16* out, float* lse2) {
  constexpr int kRow = HD + kPad;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16* sq = reinterpret_cast<bf16*>(shared);
  bf16* sk = sq + kTile * kRow;
  bf16* sv = sk + kTile * kRow;

  const int64_t S = geo.seq, H = geo.heads;
  const int64_t tiles = (S + kTile - 1) / kTile, pairs = geo.batch * H;
  const int64_t tile = tiles - 1 - blockIdx.x / pairs;  // the longest tiles (most keys) first
  const int64_t bh = blockIdx.x % pairs, b = bh / H, h = bh % H, group = h / geo.per;
  const int64_t q0 = tile * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const bf16* rows = qkv + b * S * geo.ld;

  load_tile<HD>(sq, rows + q0 * geo.ld + geo.q_column(h), geo.ld, kTile, S - q0);
  __syncthreads();
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) load_a(qf[kk], sq, kRow, warp * 16, kk * 16);

  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

  for (int64_t j = 0; j <= tile; ++j) {
    const int64_t k0 = j * kTile;
    __syncthreads();  // every warp is done with the previous keys and values
    load_tile<HD>(sk, rows + k0 * geo.ld + geo.k_column(group), geo.ld, kTile, S - k0);
    load_tile<HD>(sv, rows + k0 * geo.ld + geo.v_column(group), geo.ld, kTile, S - k0);
    __syncthreads();

    // s = Q K^T for the warp's 16 queries and the tile's 64 keys (B = K^T: K's rows are columns).
    float s[kTile / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
        const bf16* key = sk + (n * 8 + g) * kRow + kk * 16 + 2 * t;
        mma(s[n], qf[kk], load_pair(key), load_pair(key + 8));
      }
    }
    // Base-2 scaled scores, the causal mask, the running maximum.
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = k0 + n * 8 + 2 * t + (e & 1);
        float v = s[n][e] * geo.scale_log2;
        if (key > row[e >> 1] || key >= S) v = -INFINITY;
        s[n][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);  // finite: key 0 of the first tile is unmasked for every row
      alpha[r] = exp2f(m[r] - mx[r]);
      m[r] = mx[r];
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[n][e] - m[e >> 1]);
        s[n][e] = p;
        l[e >> 1] += p;
      }
    }
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }
    // o += P V, 16 keys at a time.
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t pa[4];
      c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
      mma_row_major_b<HD / 8>(o, pa, sv, kRow, kk * 16, 0);
    }
  }

  const int64_t ldo = H * HD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    if (row[r] >= S) continue;
    const float inv = 1.0f / l[r];
    bf16* dst = out + (b * S + row[r]) * ldo + h * HD + 2 * t;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d)
      *reinterpret_cast<uint32_t*>(dst + d * 8) = pack_bf16(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    if (lse2 != nullptr && t == 0) lse2[bh * S + row[r]] = m[r] + log2f(l[r]);
  }
}

// ---- backward ----------------------------------------------------------------------------------

// dot[(b * H + h) * S + s] = sum_d out[b S + s, h hd + d] * dout[...]: one warp per row and head.
__global__ void flash_row_dots_kernel(Geometry geo, const bf16* out, const bf16* dout, float* dot) {
  const int64_t H = geo.heads, hd = geo.head_dim, rows = geo.batch * geo.seq * H;
  const int lane = threadIdx.x & 31;
  const int64_t warps = grid_threads() / 32;
  for (int64_t w = global_thread() / 32; w < rows; w += warps) {
    const int64_t token = w / H, h = w % H;
    const bf16* o = out + token * H * hd + h * hd;
    const bf16* d = dout + token * H * hd + h * hd;
    float sum = 0.0f;
    for (int64_t c = lane; c < hd; c += 32) sum += __bfloat162float(o[c]) * __bfloat162float(d[c]);
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const int64_t b = token / geo.seq, s = token % geo.seq;
    if (lane == 0) dot[(b * H + h) * geo.seq + s] = sum;
  }
}

// dqkv's q columns from the fp32 accumulator [batch * seq, heads * head_dim].
__global__ void flash_store_dq_kernel(Geometry geo, const float* dq, bf16* dqkv) {
  const int64_t hd = geo.head_dim, cols = geo.heads * hd, n = geo.batch * geo.seq * cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t token = i / cols, c = i % cols;
    dqkv[token * geo.ld + geo.q_column(c / hd) + c % hd] = __float2bfloat16_rn(dq[i]);
  }
}

// One block per (64-key tile, batch, group): the tile's key and value gradients over every head of
// the group and every query tile at or after the keys, in registers; the query gradients added into
// dq (fp32) with atomics.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(Geometry geo, const bf16* qkv, const bf16* dout, const float* lse2,
                          const float* dot, float* dq, bf16* dqkv) {
  constexpr int kRow = HD + kPad;
  constexpr int kDsRow = kBwdQueries + kPad;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16* sk = reinterpret_cast<bf16*>(shared);
  bf16* sv = sk + kTile * kRow;
  bf16* sq = sv + kTile * kRow;
  bf16* sdo = sq + kBwdQueries * kRow;
  bf16* sds = sdo + kBwdQueries * kRow;  // dS^T [64 keys][32 queries]
  float* slse = reinterpret_cast<float*>(sds + kTile * kDsRow);
  float* sdot = slse + kBwdQueries;

  const int64_t S = geo.seq, H = geo.heads, groups = H / geo.per, ldo = H * HD;
  const int64_t pairs = geo.batch * groups;
  const int64_t key_tile = blockIdx.x / pairs;  // key tile 0 (the most queries) first
  const int64_t bg = blockIdx.x % pairs, b = bg / groups, group = bg % groups;
  const int64_t k0 = key_tile * kTile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int matrix = lane >> 3, r8 = lane & 7;
  const bf16* rows = qkv + b * S * geo.ld;

  load_tile<HD>(sk, rows + k0 * geo.ld + geo.k_column(group), geo.ld, kTile, S - k0);
  load_tile<HD>(sv, rows + k0 * geo.ld + geo.v_column(group), geo.ld, kTile, S - k0);

  float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
  const int64_t key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  const int64_t query_tiles = (S + kBwdQueries - 1) / kBwdQueries;

  for (int64_t j = 0; j < geo.per; ++j) {
    const int64_t h = group * geo.per + j;
    for (int64_t i = k0 / kBwdQueries; i < query_tiles; ++i) {
      const int64_t q0 = i * kBwdQueries;
      __syncthreads();  // the previous query tile's Q, dO and dS^T are read
      load_tile<HD>(sq, rows + q0 * geo.ld + geo.q_column(h), geo.ld, kBwdQueries, S - q0);
      load_tile<HD>(sdo, dout + (b * S + q0) * ldo + h * HD, ldo, kBwdQueries, S - q0);
      if (threadIdx.x < kBwdQueries) {
        const int64_t q = q0 + threadIdx.x;
        slse[threadIdx.x] = q < S ? lse2[(b * H + h) * S + q] : 0.0f;
        sdot[threadIdx.x] = q < S ? dot[(b * H + h) * S + q] : 0.0f;
      }
      __syncthreads();

      // s^T = K Q^T and dp^T = V dO^T for the warp's 16 keys and the tile's 32 queries.
      float st[kBwdQueries / 8][4] = {}, dpt[kBwdQueries / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t ka[4], va[4];
        load_a(ka, sk, kRow, warp * 16, kk * 16);
        load_a(va, sv, kRow, warp * 16, kk * 16);
#pragma unroll
        for (int n = 0; n < kBwdQueries / 8; ++n) {
          const bf16* q = sq + (n * 8 + g) * kRow + kk * 16 + 2 * t;
          const bf16* d = sdo + (n * 8 + g) * kRow + kk * 16 + 2 * t;
          mma(st[n], ka, load_pair(q), load_pair(q + 8));
          mma(dpt[n], va, load_pair(d), load_pair(d + 8));
        }
      }
      // P^T (recomputed from lse2) and dS^T = P^T * (dP^T - dot), zero where masked.
#pragma unroll
      for (int n = 0; n < kBwdQueries / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = n * 8 + 2 * t + (e & 1);
          const int64_t q = q0 + c, k = key[e >> 1];
          const bool live = k <= q && q < S;  // k <= q < S: the key exists too
          const float p = live ? exp2f(st[n][e] * geo.scale_log2 - slse[c]) : 0.0f;
          st[n][e] = p;
          dpt[n][e] = p * (dpt[n][e] - sdot[c]);
        }
      }
      // dV += P^T dO and dK += dS^T Q, 16 queries at a time; dS^T to shared memory for dQ.
#pragma unroll
      for (int kk = 0; kk < kBwdQueries / 16; ++kk) {
        uint32_t pa[4], dsa[4];
        c_to_a(pa, st[2 * kk], st[2 * kk + 1]);
        c_to_a(dsa, dpt[2 * kk], dpt[2 * kk + 1]);
        mma_row_major_b<HD / 8>(dv, pa, sdo, kRow, kk * 16, 0);
        mma_row_major_b<HD / 8>(dk, dsa, sq, kRow, kk * 16, 0);
      }
#pragma unroll
      for (int n = 0; n < kBwdQueries / 8; ++n) {
        bf16* dst = sds + (warp * 16 + g) * kDsRow + n * 8 + 2 * t;
        *reinterpret_cast<uint32_t*>(dst) = pack_bf16(dpt[n][0], dpt[n][1]);
        *reinterpret_cast<uint32_t*>(dst + 8 * kDsRow) = pack_bf16(dpt[n][2], dpt[n][3]);
      }
      __syncthreads();

      // dQ (32 queries x HD) += dS K * scale: warp w takes queries [16 (w % 2), +16) and the half
      // [w / 2 * HD / 2, +HD / 2) of the columns. A = dS from dS^T (transposed loads).
      const int mt = warp & 1;
      const int first_column = (warp >> 1) * (HD / 2);
      float acc[HD / 16][4] = {};
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        uint32_t a[4];
        load_matrices_transposed(
            a, sds + (kk * 16 + (matrix >> 1) * 8 + r8) * kDsRow + mt * 16 + (matrix & 1) * 8);
        mma_row_major_b<HD / 16>(acc, a, sk, kRow, kk * 16, first_column);
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t q = q0 + mt * 16 + g + half * 8;
        if (q >= S) continue;
        float* dst = dq + (b * S + q) * ldo + h * HD + first_column + 2 * t;
#pragma unroll
        for (int n = 0; n < HD / 16; ++n) {
          atomicAdd(dst + n * 8, acc[n][2 * half] * geo.scale);
          atomicAdd(dst + n * 8 + 1, acc[n][2 * half + 1] * geo.scale);
        }
      }
    }
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (key[half] >= S) continue;
    bf16* row = dqkv + (b * S + key[half]) * geo.ld + 2 * t;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) {
      *reinterpret_cast<uint32_t*>(row + geo.k_column(group) + d * 8) =
          pack_bf16(dk[d][2 * half] * geo.scale, dk[d][2 * half + 1] * geo.scale);
      *reinterpret_cast<uint32_t*>(row + geo.v_column(group) + d * 8) =
          pack_bf16(dv[d][2 * half], dv[d][2 * half + 1]);
    }
  }
}

// ---- host side ---------------------------------------------------------------------------------

Geometry geometry(const AttentionLayout& l) {
  Geometry geo{};
  geo.batch = l.batch;
  geo.seq = l.seq;
  geo.heads = l.heads;
  geo.per = l.heads / l.groups;
  geo.ld = l.ld;
  geo.head_dim = l.head_dim;
  geo.q_offset = l.q_offset;
  geo.k_offset = l.k_offset;
  geo.v_offset = l.v_offset;
  geo.q_group_stride = l.q_group_stride;
  geo.kv_group_stride = l.kv_group_stride;
  geo.scale = 1.0f / sqrtf(static_cast<float>(l.head_dim));  // as the cuBLAS path and the CPU
  geo.scale_log2 = geo.scale * kLog2e;
  return geo;
}

constexpr std::size_t forward_shared_bytes(int hd) {
  return static_cast<std::size_t>(3 * kTile * (hd + kPad)) * sizeof(bf16);
}
constexpr std::size_t backward_shared_bytes(int hd) {
  return static_cast<std::size_t>(2 * kTile * (hd + kPad) + 2 * kBwdQueries * (hd + kPad) +
                                  kTile * (kBwdQueries + kPad)) *
             sizeof(bf16) +
         2 * kBwdQueries * sizeof(float);
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

void expect_served(const Handle& handle, const AttentionLayout& l, const char* name,
                   std::initializer_list<const void*> pointers) {
  l.validate();
  if (!flash_attention_supported(handle, l))
    throw std::invalid_argument(std::string(name) + ": head_dim " + std::to_string(l.head_dim) +
                                ", row stride " + std::to_string(l.ld) +
                                " not served (head_dim 64 or 128, 16-byte columns, compute capability 8.0 "
                                "or newer)");
  for (const void* p : pointers)
    if (!aligned16(p)) throw std::invalid_argument(std::string(name) + ": a buffer is not 16-byte aligned");
}

template <class Kernel>
void allow_shared(Kernel kernel, std::size_t bytes, const char* name) {
  PLEXUS_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
      name);
}

}  // namespace

bool flash_attention_supported(const Handle& handle, const AttentionLayout& l) {
  if (l.head_dim != 64 && l.head_dim != 128) return false;
  for (int64_t v : {l.ld, l.q_offset, l.k_offset, l.v_offset, l.q_group_stride, l.kv_group_stride})
    if (v % 8 != 0) return false;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, handle.device()) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return false;
  }
  if (major < 8) return false;
  // The build must hold machine code (or PTX) of compute capability 8.0 or newer for the device.
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, flash_forward_kernel<64>) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return false;
  }
  return attributes.ptxVersion >= 80;
}

void flash_attention_forward(Handle& handle, const AttentionLayout& l, const bfloat16* qkv, bfloat16* out,
                             float* lse2) {
  constexpr const char* kName = "flash_attention_forward";
  expect_served(handle, l, kName, {qkv, out});
  if (l.batch == 0 || l.seq == 0) return;
  const Geometry geo = geometry(l);
  const unsigned blocks = row_blocks((l.seq + kTile - 1) / kTile * l.batch * l.heads, kName);
  cudaStream_t stream = handle.stream();
  if (l.head_dim == 64) {
    allow_shared(flash_forward_kernel<64>, forward_shared_bytes(64), kName);
    flash_forward_kernel<64>
        <<<blocks, kThreads, forward_shared_bytes(64), stream>>>(geo, dev(qkv), dev(out), lse2);
  } else {
    allow_shared(flash_forward_kernel<128>, forward_shared_bytes(128), kName);
    flash_forward_kernel<128>
        <<<blocks, kThreads, forward_shared_bytes(128), stream>>>(geo, dev(qkv), dev(out), lse2);
  }
  check_launch(kName);
}

void flash_attention_backward(Handle& handle, const AttentionLayout& l, const bfloat16* qkv,
                              const bfloat16* out, const bfloat16* dout, const float* lse2, bfloat16* dqkv) {
  constexpr const char* kName = "flash_attention_backward";
  expect_served(handle, l, kName, {qkv, dout, dqkv});
  if (lse2 == nullptr) throw std::invalid_argument("flash_attention_backward: needs the forward's lse2");
  if (l.batch == 0 || l.seq == 0) return;
  const Geometry geo = geometry(l);
  cudaStream_t stream = handle.stream();
  const auto rows = static_cast<std::size_t>(l.batch * l.seq * l.heads);
  const auto dq_count = rows * static_cast<std::size_t>(l.head_dim);
  Carve sizes;
  sizes.take<float>(rows);
  sizes.take<float>(dq_count);
  Carve carve(handle.scratch(sizes.bytes()));
  float* dot = carve.take<float>(rows);
  float* dq = carve.take<float>(dq_count);

  PLEXUS_CUDA_CHECK(cudaMemsetAsync(dq, 0, dq_count * sizeof(float), stream), kName);
  flash_row_dots_kernel<<<elementwise_blocks(static_cast<int64_t>(rows) * 32), kElementwiseThreads, 0,
                          stream>>>(geo, dev(out), dev(dout), dot);
  check_launch(kName);
  const unsigned blocks = row_blocks((l.seq + kTile - 1) / kTile * l.batch * l.groups, kName);
  if (l.head_dim == 64) {
    allow_shared(flash_backward_kernel<64>, backward_shared_bytes(64), kName);
    flash_backward_kernel<64><<<blocks, kThreads, backward_shared_bytes(64), stream>>>(
        geo, dev(qkv), dev(dout), lse2, dot, dq, dev(dqkv));
  } else {
    allow_shared(flash_backward_kernel<128>, backward_shared_bytes(128), kName);
    flash_backward_kernel<128><<<blocks, kThreads, backward_shared_bytes(128), stream>>>(
        geo, dev(qkv), dev(dout), lse2, dot, dq, dev(dqkv));
  }
  check_launch(kName);
  flash_store_dq_kernel<<<elementwise_blocks(static_cast<int64_t>(dq_count)), kElementwiseThreads, 0,
                          stream>>>(geo, dq, dev(dqkv));
  check_launch(kName);
}

}  // namespace plexus::cuda_kernels

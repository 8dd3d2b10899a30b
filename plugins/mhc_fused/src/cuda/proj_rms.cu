// proj_rms on CUDA: per token, with v the n*C values of x (stream-major),
//   r = 1 / (sqrt(mean(v^2)) + eps)        p = v . phi      (phi [n*C, W], W = n*n + 2n small)
// The projection is a skinny product ([T, nC] x [nC, W]), written here rather than taken from
// cuBLAS so that the norm comes from the same read of x, and so that bf16 x meets the float32
// phi without a converted copy of either.
//
// Forward, one kernel, x read once: a block owns 32 tokens (one per lane) and walks their rows in
// chunks of 64 values staged in shared memory with phi's matching 64 rows; warp w takes 8 values
// of each chunk and accumulates all W outputs of its lane's token in registers, plus the sum of
// squares; at the end the 8 warps' partial outputs are added in warp order and the norm is
// formed. phi's rows are read by all lanes at once (broadcast), 4 columns per 16-byte load.
//
// Backward: dx needs the whole row's norm before any of its elements can be written, and dphi
// is a sum over all tokens, so x is read twice: (1) one warp per token forms the norm's
// coefficient c_t = d mean * 2/(n*C) from x and dr; (2) a block owns 64 columns of the row and a
// contiguous range of token tiles: per tile of 32 tokens it stages x, dp and c_t, writes
// dx += dp . phi^T + c_t x (dx read and written once) and accumulates its 64 rows of dphi in
// registers across the range; (3) the ranges' partial dphi are added in range order.
//
// W above 80 (n > 8) runs the kernels once per group of 80 columns (x read once per group).
// Rounding: the norm as the CPU backend rounds it (sum of squares in double, then mean, sqrt,
// + eps, reciprocal in float); the products accumulate in float (fused multiply-adds allowed),
// each lane's sum of squares per chunk in float, added in double.
#include "common.cuh"
#include "plexus_cuda_kernels/scratch_layout.hpp"
#include "primitives.hpp"

namespace plexus::mhc_fused::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxColumns = 80;  // W columns per pass (n = 8: W = 80)

// Columns a pass keeps in registers: a multiple of 8 (so 16-byte rows and conflict-free strides).
int padded_columns(int columns) {
  return columns <= 8 ? 8 : columns <= 24 ? 24 : columns <= 48 ? 48 : kMaxColumns;
}

// Stages a Rows x Cols tile of x (rows t0.., columns k0..) into out (row stride Stride floats),
// widened, zero outside the tensor. `vec`: 16-byte loads (row % kVector == 0, x aligned).
template <class D, int Rows, int Cols, int Stride>
__device__ __forceinline__ void stage_tile(const D* x, int64_t tokens, int64_t row, int64_t t0, int64_t k0,
                                           bool vec, float* out) {
  constexpr int E = kVector<D>;
  static_assert(Cols % E == 0);
  if (vec) {
    constexpr int kPerRow = Cols / E;
    for (int v = static_cast<int>(threadIdx.x); v < Rows * kPerRow; v += kThreads) {
      const int tt = v / kPerRow, kk = v % kPerRow * E;
      const int64_t t = t0 + tt, k = k0 + kk;
      float values[E];
      if (t < tokens && k < row) {
        load<E>(x + t * row + k, values);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) values[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < E; ++e) out[tt * Stride + kk + e] = values[e];
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < Rows * Cols; i += kThreads) {
      const int tt = i / Cols, kk = i % Cols;
      const int64_t t = t0 + tt, k = k0 + kk;
      out[tt * Stride + kk] = t < tokens && k < row ? to_f32(x[t * row + k]) : 0.0f;
    }
  }
}

// ---- forward ----

constexpr int kRowsF = 32;   // tokens per block: one per lane
constexpr int kChunkF = 64;  // values of a row per chunk: 8 per warp

template <int SP>
struct ForwardShared {
  float x[kRowsF][kChunkF + 1];        // + 1: lanes read a column, conflict-free
  alignas(16) float phi[kChunkF][SP];  // phi's rows of the chunk, columns w0.., zero-padded
  float sums[kRowsF][SP + 1];          // the warps' outputs, added in warp order
  double squares[kWarps][kRowsF];
};

template <class D>
struct ForwardArgs {
  const D* x;
  const float* phi;
  float* p;
  float* r;  // written by the pass with norm
  int64_t tokens, row;
  int width, w0, wn;  // W; this pass's first column and column count
  float eps;
  bool vec, norm;
};

template <class D, int SP>
__global__ void __launch_bounds__(kThreads) proj_rms_forward_kernel(ForwardArgs<D> a) {
  __shared__ ForwardShared<SP> s;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kRowsF;

  float acc[SP];
#pragma unroll
  for (int c = 0; c < SP; ++c) acc[c] = 0.0f;
  double squares = 0;

  for (int64_t k0 = 0; k0 < a.row; k0 += kChunkF) {
    stage_tile<D, kRowsF, kChunkF, kChunkF + 1>(a.x, a.tokens, a.row, t0, k0, a.vec, &s.x[0][0]);
    for (int i = tid; i < kChunkF * SP; i += kThreads) {
      const int kk = i / SP, c = i % SP;
      const int64_t k = k0 + kk;
      s.phi[kk][c] = k < a.row && c < a.wn ? a.phi[k * a.width + a.w0 + c] : 0.0f;
    }
    __syncthreads();
    float chunk_squares = 0;
#pragma unroll
    for (int i = 0; i < kChunkF / kWarps; ++i) {
      const int kk = warp * (kChunkF / kWarps) + i;
      const float v = s.x[lane][kk];
      chunk_squares += v * v;
      const float4* f = reinterpret_cast<const float4*>(s.phi[kk]);
#pragma unroll
      for (int c = 0; c < SP / 4; ++c) {
        const float4 q = f[c];
        acc[4 * c] += v * q.x;
        acc[4 * c + 1] += v * q.y;
        acc[4 * c + 2] += v * q.z;
        acc[4 * c + 3] += v * q.w;
      }
    }
    squares += chunk_squares;
    __syncthreads();
  }

  // The 8 partial sums of every output, added in warp order.
  s.squares[warp][lane] = squares;
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int c = 0; c < SP; ++c) s.sums[lane][c] = (w == 0 ? 0.0f : s.sums[lane][c]) + acc[c];
    }
    __syncthreads();
  }
  for (int i = tid; i < kRowsF * a.wn; i += kThreads) {
    const int tt = i / a.wn, c = i % a.wn;
    const int64_t t = t0 + tt;
    if (t < a.tokens) a.p[t * a.width + a.w0 + c] = s.sums[tt][c];
  }
  if (a.norm && warp == 0) {
    const int64_t t = t0 + lane;
    if (t < a.tokens) {
      double total = 0;
      for (int w = 0; w < kWarps; ++w) total += s.squares[w][lane];
      const float mean = static_cast<float>(total / static_cast<double>(a.row));
      const float rms = sqrtf(mean);
      a.r[t] = 1.0f / (rms + a.eps);
    }
  }
}

template <class D, int SP>
void launch_forward(cudaStream_t stream, const ForwardArgs<D>& a) {
  const int64_t blocks = (a.tokens + kRowsF - 1) / kRowsF;
  proj_rms_forward_kernel<D, SP><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  check_launch("mhc_fused proj_rms forward");
}

// ---- backward (1): the norm's coefficient per token ----

// c_t = d mean * 2/(n*C), with the CPU backend's steps: d rms = -dr r^2, d mean = d rms / (2 rms)
// (0 for an all-zero token, where d sqrt(m)/dm is infinite and d mean/dv is 0).
template <class D, int E>
__global__ void __launch_bounds__(kThreads) norm_coefficient_kernel(const D* x, const float* dr, float* coef,
                                                                    int64_t tokens, int64_t row, float eps) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (t >= tokens) return;  // the whole warp
  const D* v = x + t * row;
  double total = 0;
  for (int64_t k = static_cast<int64_t>(lane) * E; k < row; k += 32 * E) {
    float values[E];
    load<E>(v + k, values);
    float s = 0;
#pragma unroll
    for (int e = 0; e < E; ++e) s += values[e] * values[e];
    total += s;
  }
  total = warp_sum(total);
  if (lane == 0) {
    const float mean = static_cast<float>(total / static_cast<double>(row));
    const float rms = sqrtf(mean);
    const float r = 1.0f / (rms + eps);
    const float d_rms = -dr[t] * r * r;
    const float d_mean = rms > 0.0f ? d_rms / (2.0f * rms) : 0.0f;
    coef[t] = d_mean * (2.0f / static_cast<float>(row));
  }
}

// ---- backward (2): dx and the partial dphi of a range of tokens ----

constexpr int kRowsB = 32;   // tokens per tile
constexpr int kChunkB = 64;  // columns of the row per block

template <int SP>
struct BackwardShared {
  alignas(16) float x[kRowsB][kChunkB + 4];  // rows 16-byte aligned
  alignas(16) float dp[kRowsB][SP + 4];      // SP + 4 = 4 mod 8: 16-byte loads of 8 rows conflict-free
  alignas(16) float phi[SP][kChunkB + 4];    // phi's chunk transposed: [column of W][column of the row]
  float coef[kRowsB];
};

template <class D>
struct BackwardArgs {
  const D* x;
  const float* phi;
  const float* dp;
  const float* coef;  // c_t, when dx is wanted
  D* dx;              // nullptr: not wanted
  float* partial;     // [splits, n*C, W], nullptr: dphi not wanted
  int64_t tokens, row, tiles, tiles_per_split;
  int width, w0, wn;
  bool vec_x, vec_dx, norm;  // norm: this pass adds c_t x (the first group of columns)
};

template <class D, int SP>
__global__ void __launch_bounds__(kThreads) proj_rms_backward_kernel(BackwardArgs<D> a) {
  __shared__ BackwardShared<SP> s;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kChunkB;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * a.tiles_per_split;
  const int64_t last = first + a.tiles_per_split < a.tiles ? first + a.tiles_per_split : a.tiles;

  // phi's rows k0.. (this pass's columns), transposed, once for all tiles.
  for (int i = tid; i < kChunkB * SP; i += kThreads) {
    const int kk = i / SP, c = i % SP;
    const int64_t k = k0 + kk;
    s.phi[c][kk] = k < a.row && c < a.wn ? a.phi[k * a.width + a.w0 + c] : 0.0f;
  }

  // dx: this thread's 2 tokens x 4 consecutive columns of the tile.
  const int kq = tid % 16, tq = tid / 16;
  // dphi: this thread's 4 columns (kq) x the W columns wg, wg + 16, ...
  const int wg = tid / 16;
  constexpr int kGroups = (SP + 15) / 16;
  float dphi[kGroups][4];
#pragma unroll
  for (int i = 0; i < kGroups; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) dphi[i][j] = 0.0f;

  for (int64_t tile = first; tile < last; ++tile) {
    const int64_t t0 = tile * kRowsB;
    stage_tile<D, kRowsB, kChunkB, kChunkB + 4>(a.x, a.tokens, a.row, t0, k0, a.vec_x, &s.x[0][0]);
    for (int i = tid; i < kRowsB * SP; i += kThreads) {
      const int tt = i / SP, c = i % SP;
      const int64_t t = t0 + tt;
      s.dp[tt][c] = t < a.tokens && c < a.wn ? a.dp[t * a.width + a.w0 + c] : 0.0f;
    }
    if (a.dx != nullptr && a.norm && tid < kRowsB)
      s.coef[tid] = t0 + tid < a.tokens ? a.coef[t0 + tid] : 0.0f;
    __syncthreads();

    if (a.dx != nullptr) {
      // dx[t, k] += sum_c dp[t, c] phi[k, c], then + c_t x[t, k] (the CPU backend's order).
      float out[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int j = 0; j < 4; ++j) out[r][j] = 0.0f;
#pragma unroll
      for (int c = 0; c < SP; c += 4) {
        const float4 d0 = *reinterpret_cast<const float4*>(&s.dp[2 * tq][c]);
        const float4 d1 = *reinterpret_cast<const float4*>(&s.dp[2 * tq + 1][c]);
        const float d[2][4] = {{d0.x, d0.y, d0.z, d0.w}, {d1.x, d1.y, d1.z, d1.w}};
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
          const float4 f = *reinterpret_cast<const float4*>(&s.phi[c + cc][4 * kq]);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            out[r][0] += d[r][cc] * f.x;
            out[r][1] += d[r][cc] * f.y;
            out[r][2] += d[r][cc] * f.z;
            out[r][3] += d[r][cc] * f.w;
          }
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int tt = 2 * tq + r;
        const int64_t t = t0 + tt, k = k0 + 4 * kq;
        if (t >= a.tokens || k >= a.row) continue;
        const float c_t = a.norm ? s.coef[tt] : 0.0f;
        D* g = a.dx + t * a.row + k;
        if (a.vec_dx) {  // row % 4 == 0: all four columns are in the row
          float v[4];
          load<4>(g, v);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            v[j] = v[j] + out[r][j];
            if (a.norm) v[j] = v[j] + c_t * s.x[tt][4 * kq + j];
          }
          store<4>(g, v);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (k + j >= a.row) break;
            float v = to_f32(g[j]) + out[r][j];
            if (a.norm) v = v + c_t * s.x[tt][4 * kq + j];
            g[j] = from_f32<D>(v);
          }
        }
      }
    }

    if (a.partial != nullptr) {
      // dphi[k, c] += sum over the tile's tokens of x[t, k] dp[t, c] (padding rows are zero).
      for (int tt = 0; tt < kRowsB; ++tt) {
        const float4 xv = *reinterpret_cast<const float4*>(&s.x[tt][4 * kq]);
#pragma unroll
        for (int i = 0; i < kGroups; ++i) {
          const int c = wg + 16 * i;
          if (c < SP) {
            const float d = s.dp[tt][c];
            dphi[i][0] += xv.x * d;
            dphi[i][1] += xv.y * d;
            dphi[i][2] += xv.z * d;
            dphi[i][3] += xv.w * d;
          }
        }
      }
    }
    __syncthreads();
  }

  if (a.partial == nullptr) return;
  float* partial = a.partial + static_cast<int64_t>(blockIdx.y) * a.row * a.width;
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int c = wg + 16 * i;
    if (c >= a.wn) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t k = k0 + 4 * kq + j;
      if (k < a.row) partial[k * a.width + a.w0 + c] = dphi[i][j];
    }
  }
}

template <class D, int SP>
void launch_backward(cudaStream_t stream, const BackwardArgs<D>& a, int64_t chunks, int64_t splits) {
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(splits));
  proj_rms_backward_kernel<D, SP><<<grid, kThreads, 0, stream>>>(a);
  check_launch("mhc_fused proj_rms backward");
}

// ---- backward (3): dphi += the ranges' partial sums, in range order ----

__global__ void add_partials_kernel(const float* partial, int64_t splits, int64_t count, float* dphi) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    double s = 0;
    for (int64_t p = 0; p < splits; ++p) s += partial[p * count + i];
    dphi[i] += static_cast<float>(s);
  }
}

// Runs fn.template operator()<SP>() for the padded column count of a pass of `columns` columns.
template <class Fn>
void with_columns(int columns, Fn&& fn) {
  switch (padded_columns(columns)) {
    case 8:
      fn.template operator()<8>();
      break;
    case 24:
      fn.template operator()<24>();
      break;
    case 48:
      fn.template operator()<48>();
      break;
    default:
      fn.template operator()<kMaxColumns>();
      break;
  }
}

// Token ranges of the backward's dphi: enough blocks to fill a large GPU (about 512 with the
// column chunks), each range a whole number of tiles; depends only on the sizes.
int64_t tiles_per_split(int64_t tiles, int64_t chunks) {
  const int64_t wanted = std::clamp<int64_t>((512 + chunks - 1) / chunks, 1, tiles);
  return (tiles + wanted - 1) / wanted;
}

}  // namespace

template <class A>
void CudaPrimitives<A>::proj_rms_forward(Handle& handle, const MhcProblem& pb,
                                         const plx_mhc_proj_rms_forward_args& a) {
  if (pb.tokens == 0) return;
  using D = device_t<A>;
  ForwardArgs<D> args{};
  args.x = dev(mhc_in<A>(a.x));
  args.phi = mhc_in<float>(a.phi);
  args.p = mhc_out<float>(a.p);
  args.r = mhc_out<float>(a.r);
  args.tokens = pb.tokens;
  args.row = pb.streams * pb.hidden;
  args.width = static_cast<int>(pb.width);
  args.eps = static_cast<float>(pb.eps);
  args.vec = args.row % kVector<D> == 0 && aligned(args.x, 16);
  for (int w0 = 0; w0 < args.width; w0 += kMaxColumns) {
    args.w0 = w0;
    args.wn = std::min(kMaxColumns, args.width - w0);
    args.norm = w0 == 0;
    with_columns(args.wn, [&]<int SP>() { launch_forward<D, SP>(handle.stream(), args); });
  }
}

template <class A>
void CudaPrimitives<A>::proj_rms_backward(Handle& handle, const MhcProblem& pb,
                                          const plx_mhc_proj_rms_backward_args& a) {
  using D = device_t<A>;
  D* dx = dev(mhc_out_if<A>(a.dx));
  float* dphi = mhc_out_if<float>(a.dphi);
  if (pb.tokens == 0 || (dx == nullptr && dphi == nullptr)) return;
  const int64_t row = pb.streams * pb.hidden;
  const int64_t chunks = (row + kChunkB - 1) / kChunkB;
  const int64_t tiles = (pb.tokens + kRowsB - 1) / kRowsB;
  const int64_t per_split = tiles_per_split(tiles, chunks);
  const int64_t splits = (tiles + per_split - 1) / per_split;
  struct Temps {
    float* coef;
    float* partial;
  };
  const Temps t = cuda_kernels::carve_scratch(handle, [&](cuda_kernels::ScratchLayout& s) {
    return Temps{s.take<float>(dx != nullptr ? pb.tokens : 0),
                 s.take<float>(dphi != nullptr ? splits * row * pb.width : 0)};
  });
  cudaStream_t stream = handle.stream();

  const D* x = dev(mhc_in<A>(a.x));
  const bool vec_x = row % kVector<D> == 0 && aligned(x, 16);
  if (dx != nullptr) {
    const unsigned blocks = static_cast<unsigned>((pb.tokens + kWarps - 1) / kWarps);
    const float eps = static_cast<float>(pb.eps);
    if (vec_x)
      norm_coefficient_kernel<D, kVector<D>>
          <<<blocks, kThreads, 0, stream>>>(x, mhc_in<float>(a.dr), t.coef, pb.tokens, row, eps);
    else
      norm_coefficient_kernel<D, 1>
          <<<blocks, kThreads, 0, stream>>>(x, mhc_in<float>(a.dr), t.coef, pb.tokens, row, eps);
    check_launch("mhc_fused proj_rms backward: norm");
  }

  BackwardArgs<D> args{};
  args.x = x;
  args.phi = mhc_in<float>(a.phi);
  args.dp = mhc_in<float>(a.dp);
  args.coef = t.coef;
  args.dx = dx;
  args.partial = t.partial;
  args.tokens = pb.tokens;
  args.row = row;
  args.tiles = tiles;
  args.tiles_per_split = per_split;
  args.width = static_cast<int>(pb.width);
  args.vec_x = vec_x;
  args.vec_dx = dx != nullptr && row % 4 == 0 && aligned(dx, 4 * sizeof(D));
  for (int w0 = 0; w0 < args.width; w0 += kMaxColumns) {
    args.w0 = w0;
    args.wn = std::min(kMaxColumns, args.width - w0);
    args.norm = w0 == 0;
    with_columns(args.wn, [&]<int SP>() { launch_backward<D, SP>(stream, args, chunks, splits); });
  }

  if (dphi != nullptr) {
    const int64_t count = row * pb.width;
    add_partials_kernel<<<blocks_for(count, kThreads), kThreads, 0, stream>>>(t.partial, splits, count, dphi);
    check_launch("mhc_fused proj_rms backward: dphi");
  }
}

PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, proj_rms, float, Handle&);
PLEXUS_MHC_INSTANTIATE_PAIR_WITH(CudaPrimitives, proj_rms, bfloat16, Handle&);

}  // namespace plexus::mhc_fused::gpu

// What the CUDA kernels of mhc_fused share: the device type behind an activation type, 16-byte
// vector loads and stores widened to float, reductions with a fixed order, the deterministic
// column sums of the second pass, and launch checks.
//
// Arithmetic is fp32 whatever the activation type (a bf16 value is widened exactly on load and
// rounded once, to nearest even, on store). Determinism: no float atomics anywhere; every sum has
// an order fixed by the problem's sizes alone (grids and block shapes never depend on the device),
// so results repeat bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "plexus_cuda_kernels/device_types.cuh"
#include "plexus_cuda_kernels/error.hpp"
#include "plexus_cuda_kernels/types.hpp"

namespace plexus::mhc_fused::gpu {

// ---- element types ----

// The device type behind an interface type and the fp32 conversions: the kernel library's.
using cuda_kernels::dev;
using cuda_kernels::device_t;
using cuda_kernels::from_f32;
using cuda_kernels::to_f32;

// Elements of D in one 16-byte load: 4 floats or 8 bf16.
template <class D>
inline constexpr int kVector = static_cast<int>(16 / sizeof(D));

// ---- vector loads and stores ----

template <int Bytes>
struct Raw;
template <>
struct Raw<4> {
  using type = unsigned int;
};
template <>
struct Raw<8> {
  using type = uint2;
};
template <>
struct Raw<16> {
  using type = uint4;
};

// The E consecutive elements at p, widened. With E * sizeof(D) >= 4 this is one load of that many
// bytes, so p must be aligned to it; E == 1 is a plain scalar load.
template <int E, class D>
__device__ __forceinline__ void load(const D* p, float (&v)[E]) {
  constexpr int kBytes = E * static_cast<int>(sizeof(D));
  if constexpr (kBytes < 4) {
    static_assert(E == 1, "a vector load moves 4, 8 or 16 bytes");
    v[0] = to_f32(*p);
  } else {
    constexpr int kWords = kBytes / 4;
    union {
      typename Raw<kBytes>::type raw;
      unsigned int word[kWords];
    } u;
    u.raw = *reinterpret_cast<const typename Raw<kBytes>::type*>(p);
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      if constexpr (std::is_same_v<D, float>) {
        v[i] = __uint_as_float(u.word[i]);
      } else {  // two bf16, element 0 in the low half: a bf16 is the high half of its float
        v[2 * i] = __uint_as_float(u.word[i] << 16);
        v[2 * i + 1] = __uint_as_float(u.word[i] & 0xffff0000u);
      }
    }
  }
}

// Stores E values at p, each rounded to D once (same alignment rule as load).
template <int E, class D>
__device__ __forceinline__ void store(D* p, const float (&v)[E]) {
  constexpr int kBytes = E * static_cast<int>(sizeof(D));
  if constexpr (kBytes < 4) {
    static_assert(E == 1, "a vector store moves 4, 8 or 16 bytes");
    *p = from_f32<D>(v[0]);
  } else {
    constexpr int kWords = kBytes / 4;
    union {
      typename Raw<kBytes>::type raw;
      unsigned int word[kWords];
    } u;
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      if constexpr (std::is_same_v<D, float>) {
        u.word[i] = __float_as_uint(v[i]);
      } else {
        const unsigned int lo = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * i]));
        const unsigned int hi = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * i + 1]));
        u.word[i] = lo | (hi << 16);
      }
    }
    *reinterpret_cast<typename Raw<kBytes>::type*>(p) = u.raw;
  }
}

// Whether a pointer allows loads of `bytes` bytes.
inline bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// Whether rows of c elements of D allow 16-byte vectors: c a multiple of kVector<D> and every
// given base address (nullptr: absent, ignored) 16-byte aligned, so every row start is too.
template <class D>
bool vectors_fit(int64_t c, std::initializer_list<const void*> pointers) {
  if (c % kVector<D> != 0) return false;
  for (const void* p : pointers)
    if (p != nullptr && !aligned(p, 16)) return false;
  return true;
}

// ---- reductions ----

// The sum over the 32 lanes of a warp, in double, on every lane: an xor butterfly whose order
// depends only on the lane numbers (a + b == b + a exactly, so all lanes agree).
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Floats of one warp's shared scratch for warp_sums.
constexpr int kWarpScratch = 32 * 33;

// For every v < NV: sums values[v] over the warp's 32 lanes, in lane order and in double, and
// calls store(v, sum) on lane v % 32. The values go through `scratch` (kWarpScratch floats of
// this warp's shared memory) 32 at a time, transposed, so a lane adds one value's 32 partials
// instead of the warp running NV shuffle trees. All 32 lanes must call it.
template <int NV, class Store>
__device__ __forceinline__ void warp_sums(const float (&values)[NV], float* scratch, Store&& store) {
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int base = 0; base < NV; base += 32) {
    __syncwarp();
#pragma unroll
    for (int v = base; v < NV && v < base + 32; ++v) scratch[(v - base) * 33 + lane] = values[v];
    __syncwarp();
    if (base + lane < NV) {
      double s = 0;
      for (int l = 0; l < 32; ++l) s += scratch[lane * 33 + l];
      store(base + lane, s);
    }
  }
  __syncwarp();
}

// ---- launches ----

// Right after a launch: a bad configuration (or an earlier asynchronous fault) becomes an
// exception naming the kernel.
inline void check_launch(const char* name) {
  PLEXUS_CUDA_CHECK(cudaGetLastError(), name);
}

constexpr int64_t kMaxGrid = 65535;  // grid-stride loops stop growing the grid here

inline unsigned blocks_for(int64_t units, int64_t per_block, int64_t cap = kMaxGrid) {
  return static_cast<unsigned>(std::clamp<int64_t>((units + per_block - 1) / per_block, 1, cap));
}

// ---- the per-token kernels' shapes ----

// Streams a per-token kernel keeps in registers: 4 for n <= 4, 8 for n <= 8 (loops stop at n),
// 0 above: the generic path, which loops over the streams in memory and leaves the per-token dot
// products to row_dots.
inline int stream_bucket(int64_t n) {
  return n <= 4 ? 4 : n <= 8 ? 8 : 0;
}

// ---- dot products over rows, one warp each (the generic path) ----

// For every d < count: dot.store(d, sum over k < length of dot.term(d, k)), each lane summing
// its terms (k = lane, lane + 32, ...) in float, the lanes added in double.
template <class Dot>
__global__ void __launch_bounds__(256) row_dots_kernel(int64_t count, int64_t length, Dot dot) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t d = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  if (d >= count) return;  // the whole warp
  float s = 0;
  for (int64_t k = lane; k < length; k += 32) s += dot.term(d, k);
  const double total = warp_sum(static_cast<double>(s));
  if (lane == 0) dot.store(d, total);
}

template <class Dot>
void row_dots(cudaStream_t stream, int64_t count, int64_t length, const Dot& dot, const char* name) {
  if (count == 0) return;
  row_dots_kernel<<<static_cast<unsigned>((count + 7) / 8), 256, 0, stream>>>(count, length, dot);
  check_launch(name);
}

// ---- the second pass of sums over tokens ----
//
// out[k] += sum over rows t of values[t, k], for per-token or per-block values: partial sums over
// fixed chunks of kChunkRows rows (one thread per chunk and column, rows in order, in double),
// then one pass adding the chunks in order and rounding once into out.

constexpr int64_t kChunkRows = 256;

__host__ __device__ inline int64_t chunk_count(int64_t rows) {
  return (rows + kChunkRows - 1) / kChunkRows;
}
// Doubles of the `partials` temporary of column_sums_into.
inline int64_t column_partials(int64_t rows, int64_t width) {
  return chunk_count(rows) * width;
}

template <class V>
__global__ void chunk_sums_kernel(const V* values, int64_t rows, int64_t width, double* partials) {
  const int64_t count = chunk_count(rows) * width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const int64_t chunk = i / width, k = i % width;
    const int64_t end = (chunk + 1) * kChunkRows < rows ? (chunk + 1) * kChunkRows : rows;
    double s = 0;
    for (int64_t t = chunk * kChunkRows; t < end; ++t) s += static_cast<double>(values[t * width + k]);
    partials[i] = s;
  }
}

template <class D>
__global__ void add_chunk_sums_kernel(const double* partials, int64_t chunks, int64_t width, D* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < width; k += stride) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partials[c * width + k];
    out[k] = from_f32<D>(to_f32(out[k]) + static_cast<float>(s));
  }
}

// out[k] += sum over t < rows of values[t, k] (V float or double; out float or bf16), rounded once;
// `partials` holds column_partials(rows, width) doubles.
template <class V, class D>
void column_sums_into(cudaStream_t stream, const V* values, int64_t rows, int64_t width, double* partials,
                      D* out, const char* name) {
  if (rows == 0 || width == 0) return;
  constexpr int kThreads = 256;
  chunk_sums_kernel<<<blocks_for(column_partials(rows, width), kThreads), kThreads, 0, stream>>>(
      values, rows, width, partials);
  check_launch(name);
  add_chunk_sums_kernel<<<blocks_for(width, kThreads), kThreads, 0, stream>>>(partials, chunk_count(rows),
                                                                              width, out);
  check_launch(name);
}

}  // namespace plexus::mhc_fused::gpu

// Rotary embeddings on the GPU: tables computed in double like the CPU's, rotation in fp32.
#include "device_common.cuh"
#include "plexus_cuda_kernels/rope.hpp"

namespace plexus::cuda_kernels {
namespace {

using namespace detail;

__global__ void rope_tables_kernel(int64_t positions, int64_t head_dim, double base, float* cos_table,
                                   float* sin_table) {
  const int64_t half = head_dim / 2;
  for (int64_t idx = global_thread(); idx < positions * half; idx += grid_threads()) {
    const int64_t p = idx / half, i = idx % half;
    // The CPU's expression, operation for operation, so the double arguments are identical.
    const double inv_freq = pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(p) * inv_freq;
    cos_table[idx] = static_cast<float>(cos(angle));
    sin_table[idx] = static_cast<float>(sin(angle));
  }
}

// The head start columns of one launch travel in the kernel's parameters (no device copy of the
// host array); more heads take several launches.
constexpr int64_t kHeadsPerLaunch = 64;
struct HeadColumns {
  int64_t column[kHeadsPerLaunch];
};

template <class D>
__global__ void rope_apply_kernel(D* x, int64_t rows, int64_t seq, int64_t ld, HeadColumns cols,
                                  int64_t heads, int64_t half, const float* cos_table, const float* sin_table,
                                  float sign) {
  for (int64_t idx = global_thread(); idx < rows * heads * half; idx += grid_threads()) {
    const int64_t i = idx % half, rh = idx / half;
    const int64_t h = rh % heads, r = rh / heads;
    const int64_t pos = r % seq;
    const float cs = cos_table[pos * half + i];
    const float sn = sign * sin_table[pos * half + i];  // the inverse rotation is by -angle
    D* v = x + r * ld + cols.column[h];
    const float a = to_f32(v[i]);
    const float b = to_f32(v[i + half]);
    v[i] = from_f32<D>(a * cs - b * sn);
    v[i + half] = from_f32<D>(b * cs + a * sn);
  }
}

}  // namespace

void rope_tables(int64_t positions, int64_t head_dim, double base, float* cos_table, float* sin_table,
                 cudaStream_t stream) {
  const int64_t n = positions * (head_dim / 2);
  if (n == 0) return;
  rope_tables_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(positions, head_dim, base,
                                                                                cos_table, sin_table);
  check_launch("rope_tables");
}

template <class T>
void rope_apply(T* x, int64_t rows, int64_t seq, int64_t ld, const int64_t* cols, int64_t num_heads,
                int64_t head_dim, const float* cos_table, const float* sin_table, bool inverse,
                cudaStream_t stream) {
  const int64_t half = head_dim / 2;
  if (rows == 0 || half == 0) return;
  for (int64_t first = 0; first < num_heads; first += kHeadsPerLaunch) {
    const int64_t heads = std::min(kHeadsPerLaunch, num_heads - first);
    HeadColumns chunk{};
    for (int64_t h = 0; h < heads; ++h) chunk.column[h] = cols[first + h];
    rope_apply_kernel<<<elementwise_blocks(rows * heads * half), kElementwiseThreads, 0, stream>>>(
        dev(x), rows, seq, ld, chunk, heads, half, cos_table, sin_table, inverse ? -1.0f : 1.0f);
    check_launch("rope_apply");
  }
}

template void rope_apply<float>(float*, int64_t, int64_t, int64_t, const int64_t*, int64_t, int64_t,
                                const float*, const float*, bool, cudaStream_t);
template void rope_apply<bfloat16>(bfloat16*, int64_t, int64_t, int64_t, const int64_t*, int64_t, int64_t,
                                   const float*, const float*, bool, cudaStream_t);

}  // namespace plexus::cuda_kernels

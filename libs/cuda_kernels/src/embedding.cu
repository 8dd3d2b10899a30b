// Embedding lookup and a deterministic gradient: token indices are sorted stably by id, and the
// block at the start of each run of equal ids adds that id's rows in token order.
#include <cub/device/device_radix_sort.cuh>

#include <climits>

#include "device_common.cuh"
#include "plexus_cuda_kernels/embedding.hpp"

namespace plexus::cuda_kernels {
namespace {

using namespace detail;

constexpr int kRowThreads = 256;

__global__ void first_invalid_id_kernel(int64_t n, const int32_t* ids, int64_t vocab, bool allow_ignore,
                                        int32_t ignore, unsigned long long* first) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int32_t id = ids[i];
    if (allow_ignore && id == ignore) continue;
    if (id < 0 || id >= vocab) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

template <class D>
__global__ void embedding_forward_kernel(int64_t dim, int64_t vocab, const int32_t* ids, const float* weight,
                                         D* out) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  const bool valid = id >= 0 && id < vocab;
  const float* src = weight + (valid ? static_cast<int64_t>(id) * dim : 0);
  D* dst = out + i * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) dst[c] = from_f32<D>(valid ? src[c] : NAN);
}

__global__ void iota_kernel(int32_t n, int32_t* values) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) values[i] = static_cast<int32_t>(i);
}

// Blocks (p, y) handle sorted position p if it starts a run of equal ids: they own that weight
// row, block y its columns [y * blockDim, +blockDim), and add the run's gradient rows (in token
// order, the sort being stable) onto it, one column per thread, in fp32 registers: one read and
// one write of the row, no atomics. The run's end is found first (a binary search: the ids are
// sorted), so the rows' loads do not wait on the id comparisons and several are in flight at once;
// the additions stay one after another in token order (a frequent id's run is thousands of rows
// long, spread over the row's column blocks).
template <class D>
__global__ void embedding_backward_kernel(int32_t n, int64_t dim, int64_t vocab, const int32_t* sorted_ids,
                                          const int32_t* sorted_tokens, const D* dout, float* dweight) {
  const int32_t p = static_cast<int32_t>(blockIdx.x);
  const int32_t id = sorted_ids[p];
  if (p > 0 && sorted_ids[p - 1] == id) return;
  if (id < 0 || id >= vocab) return;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  int32_t lo = p + 1, hi = n;  // the first position after the run
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (sorted_ids[mid] == id)
      lo = mid + 1;
    else
      hi = mid;
  }
  const int32_t end = lo;
  float* row = dweight + static_cast<int64_t>(id) * dim;
  float acc = row[c];
  constexpr int kInFlight = 8;
  int32_t q = p;
  for (; q + kInFlight <= end; q += kInFlight) {
    float v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i)
      v[i] = to_f32(dout[static_cast<int64_t>(sorted_tokens[q + i]) * dim + c]);
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) acc += v[i];
  }
  for (; q < end; ++q) acc += to_f32(dout[static_cast<int64_t>(sorted_tokens[q]) * dim + c]);
  row[c] = acc;
}

}  // namespace

void first_invalid_id(int64_t n, const int32_t* ids, int64_t vocab, bool allow_ignore, int32_t ignore,
                      int64_t* first_invalid, cudaStream_t stream) {
  // All bits set: -1 as int64_t, and the largest value for the unsigned atomic minimum.
  PLEXUS_CUDA_CHECK(cudaMemsetAsync(first_invalid, 0xff, sizeof(int64_t), stream), "first_invalid_id");
  if (n == 0) return;
  first_invalid_id_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      n, ids, vocab, allow_ignore, ignore, reinterpret_cast<unsigned long long*>(first_invalid));
  check_launch("first_invalid_id");
}

template <class T>
void embedding_forward(int64_t n, int64_t dim, int64_t vocab, const int32_t* ids, const float* weight, T* out,
                       cudaStream_t stream) {
  constexpr const char* kName = "embedding_forward";
  if (n == 0 || dim == 0) return;
  embedding_forward_kernel<<<row_blocks(n, kName), kRowThreads, 0, stream>>>(dim, vocab, ids, weight,
                                                                             dev(out));
  check_launch(kName);
}

template <class T>
void embedding_backward(Handle& handle, int64_t n, int64_t dim, int64_t vocab, const int32_t* ids,
                        const T* dout, float* dweight) {
  constexpr const char* kName = "embedding_backward";
  if (n == 0 || dim == 0) return;
  if (n > INT_MAX)
    throw std::invalid_argument(std::string(kName) + ": " + std::to_string(n) + " tokens exceed int");
  const auto count = static_cast<int32_t>(n);
  cudaStream_t stream = handle.stream();
  std::size_t sort_bytes = 0;
  PLEXUS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, ids, static_cast<int32_t*>(nullptr),
                                                    static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr), count, 0, 32, stream),
                    kName);
  const auto items = static_cast<std::size_t>(n);
  Carve sizes;
  sizes.take<int32_t>(items);
  sizes.take<int32_t>(items);
  sizes.take<int32_t>(items);
  sizes.take<char>(sort_bytes);
  Carve carve(handle.scratch(sizes.bytes()));
  auto* sorted_ids = carve.take<int32_t>(items);
  auto* tokens = carve.take<int32_t>(items);
  auto* sorted_tokens = carve.take<int32_t>(items);
  void* sort_temp = carve.take<char>(sort_bytes);
  iota_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(count, tokens);
  check_launch(kName);
  // Radix sort is stable: equal ids keep their token order.
  PLEXUS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, ids, sorted_ids, tokens,
                                                    sorted_tokens, count, 0, 32, stream),
                    kName);
  const int64_t column_blocks = (dim + kRowThreads - 1) / kRowThreads;
  if (column_blocks > 65535)
    throw std::invalid_argument(std::string(kName) + ": dim " + std::to_string(dim) + " exceeds one launch");
  const dim3 grid(static_cast<unsigned>(count), static_cast<unsigned>(column_blocks));
  embedding_backward_kernel<<<grid, kRowThreads, 0, stream>>>(count, dim, vocab, sorted_ids, sorted_tokens,
                                                              dev(dout), dweight);
  check_launch(kName);
}

template void embedding_forward<float>(int64_t, int64_t, int64_t, const int32_t*, const float*, float*,
                                       cudaStream_t);
template void embedding_forward<bfloat16>(int64_t, int64_t, int64_t, const int32_t*, const float*, bfloat16*,
                                          cudaStream_t);
template void embedding_backward<float>(Handle&, int64_t, int64_t, int64_t, const int32_t*, const float*,
                                        float*);
template void embedding_backward<bfloat16>(Handle&, int64_t, int64_t, int64_t, const int32_t*,
                                           const bfloat16*, float*);

}  // namespace plexus::cuda_kernels

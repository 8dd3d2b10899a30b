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

// Block p handles sorted position p if it starts a run of equal ids: it owns that weight row and
// adds the run's gradient rows (in token order, the sort being stable) onto it, one column per
// thread, in fp32 registers: one read and one write of the row, no atomics.
template <class D>
__global__ void embedding_backward_kernel(int32_t n, int64_t dim, int64_t vocab, const int32_t* sorted_ids,
                                          const int32_t* sorted_tokens, const D* dout, float* dweight) {
  const int32_t p = static_cast<int32_t>(blockIdx.x);
  const int32_t id = sorted_ids[p];
  if (p > 0 && sorted_ids[p - 1] == id) return;
  if (id < 0 || id >= vocab) return;
  float* row = dweight + static_cast<int64_t>(id) * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float acc = row[c];
    for (int32_t q = p; q < n && sorted_ids[q] == id; ++q)
      acc += to_f32(dout[static_cast<int64_t>(sorted_tokens[q]) * dim + c]);
    row[c] = acc;
  }
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
  embedding_backward_kernel<<<static_cast<unsigned>(count), kRowThreads, 0, stream>>>(
      count, dim, vocab, sorted_ids, sorted_tokens, dev(dout), dweight);
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

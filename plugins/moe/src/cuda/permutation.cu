// The permutation on the GPU: the counting sort by expert (sort_by_expert.hpp, one block), the
// gather of the rows, the weighted combine back to tokens, and their backward; a capacity's
// choice of the pairs each expert keeps (one thread per pair, from the dropless sort). The combine sums a
// token's k choices in choice order, as permutation.cpp; nothing uses atomics.
#include <cuda_runtime.h>

#include "cuda/device.cuh"
#include "cuda/kernels.hpp"
#include "cuda/sort_by_expert.hpp"

namespace plexus::moe::cuda {
namespace {

// The workers (threads) of the one block that sorts.
constexpr int kSortWorkers = 256;

__global__ void sort_kernel(sort::SortShape s, const int32_t* chosen, const uint8_t* kept, int64_t* cursor,
                            int64_t* offsets, int64_t* row_token, int64_t* row_pair, int64_t* slot_row) {
  const int64_t w = threadIdx.x;
  sort::count_chunk(s, w, chosen, kept, cursor);
  __syncthreads();
  for (int64_t e = w; e < s.experts; e += kSortWorkers) sort::total_expert(s, e, cursor, offsets);
  __syncthreads();
  if (w == 0) sort::prefix_offsets(s, offsets);
  __syncthreads();
  for (int64_t e = w; e < s.experts; e += kSortWorkers) sort::start_rows(s, e, offsets, cursor);
  __syncthreads();
  sort::place_chunk(s, w, chosen, kept, cursor, row_token, row_pair, slot_row);
}

__global__ void keep_kernel(int64_t pairs, int64_t capacity, bool by_position, const int32_t* chosen,
                            const float* probs, const int64_t* offsets, const int64_t* row_pair,
                            const int64_t* slot_row, uint8_t* kept) {
  for (int64_t i = global_thread(); i < pairs; i += grid_threads())
    kept[i] = sort::keeps(i, capacity, by_position, chosen, probs, offsets, row_pair, slot_row);
}

__global__ void gather_kernel(int64_t rows, int64_t cols, const int64_t* row_token, const float* x,
                              float* x_perm) {
  for (int64_t i = global_thread(); i < rows * cols; i += grid_threads()) {
    const int64_t r = i / cols, c = i % cols;
    x_perm[i] = x[row_token[r] * cols + c];
  }
}

__global__ void combine_kernel(int64_t tokens, int64_t topk, int64_t cols, const int64_t* slot_row,
                               const float* rows, const float* probs, const float* add, float* y) {
  for (int64_t i = global_thread(); i < tokens * cols; i += grid_threads()) {
    const int64_t t = i / cols, c = i % cols;
    float out = 0;
    for (int64_t j = 0; j < topk; ++j) {
      const int64_t r = slot_row[t * topk + j];
      if (r < 0) continue;
      const float v = rows[r * cols + c];
      out += probs != nullptr ? probs[t * topk + j] * v : v;
    }
    if (add != nullptr) out += add[i];
    y[i] = out;
  }
}

// One block per (token, choice).
__global__ void unpermute_backward_kernel(int64_t topk, int64_t cols, const int64_t* slot_row,
                                          const float* dy, const float* y_perm, const float* probs,
                                          float* dy_perm, float* dprobs) {
  const int64_t pair = blockIdx.x, t = pair / topk;
  const int64_t r = slot_row[pair];
  if (r < 0) {  // the same for the whole block
    if (threadIdx.x == 0) dprobs[pair] = 0;
    return;
  }
  const float w = probs[pair];
  float dot = 0;
  for (int64_t c = threadIdx.x; c < cols; c += kReduceThreads) {
    const float g = dy[t * cols + c];
    dy_perm[r * cols + c] = w * g;
    dot += g * y_perm[r * cols + c];
  }
  const float total = block_sum<float>(dot);
  if (threadIdx.x == 0) dprobs[pair] = total;
}

}  // namespace

int64_t sort_scratch(int64_t experts) {
  return kSortWorkers * experts;
}

void sort_by_expert(int64_t pairs, int64_t topk, int64_t experts, const int32_t* chosen, const uint8_t* kept,
                    int64_t* cursor, int64_t* offsets, int64_t* row_token, int64_t* row_pair,
                    int64_t* slot_row, cudaStream_t stream) {
  const sort::SortShape s{pairs, topk, experts, kSortWorkers};
  sort_kernel<<<1, kSortWorkers, 0, stream>>>(s, chosen, kept, cursor, offsets, row_token, row_pair,
                                              slot_row);
  check_launch("moe.layer sort_kernel");
}

void keep_within_capacity(int64_t pairs, int64_t capacity, bool by_position, const int32_t* chosen,
                          const float* probs, const int64_t* offsets, const int64_t* row_pair,
                          const int64_t* slot_row, uint8_t* kept, cudaStream_t stream) {
  if (pairs == 0) return;
  keep_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(pairs, capacity, by_position, chosen, probs,
                                                          offsets, row_pair, slot_row, kept);
  check_launch("moe.layer keep_kernel");
}

void gather_rows(int64_t rows, int64_t cols, const int64_t* row_token, const float* x, float* x_perm,
                 cudaStream_t stream) {
  if (rows * cols == 0) return;
  gather_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(rows, cols, row_token, x, x_perm);
  check_launch("moe.layer gather_kernel");
}

void combine_rows(int64_t tokens, int64_t topk, int64_t cols, const int64_t* slot_row, const float* rows,
                  const float* probs, const float* add, float* y, cudaStream_t stream) {
  if (tokens * cols == 0) return;
  combine_kernel<<<blocks_for(tokens * cols), kThreads, 0, stream>>>(tokens, topk, cols, slot_row, rows,
                                                                     probs, add, y);
  check_launch("moe.layer combine_kernel");
}

void unpermute_backward(int64_t tokens, int64_t topk, int64_t cols, const int64_t* slot_row, const float* dy,
                        const float* y_perm, const float* probs, float* dy_perm, float* dprobs,
                        cudaStream_t stream) {
  const int64_t pairs = tokens * topk;
  if (pairs == 0) return;
  unpermute_backward_kernel<<<static_cast<unsigned>(pairs), kReduceThreads, 0, stream>>>(
      topk, cols, slot_row, dy, y_perm, probs, dy_perm, dprobs);
  check_launch("moe.layer unpermute_backward_kernel");
}

}  // namespace plexus::moe::cuda

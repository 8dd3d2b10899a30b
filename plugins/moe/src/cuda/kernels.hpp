// The layer's own CUDA kernels (routing.cu, permutation.cu), float32, each queued on `stream`.
// Everything else runs through plexus_cuda_kernels (cuBLAS products, norms, activations). No
// atomics: every result is the same on every run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace plexus::moe::cuda {

struct RouteShape {
  int64_t tokens = 0, experts = 0, topk = 0;
  bool sigmoid = false;                // moe_router_score_function "sigmoid", else softmax
  bool pre_softmax = false;            // softmax over all experts before the top-k
  int64_t groups = 0, group_topk = 0;  // group-limited routing: G groups, g chosen; 0: off
  float topk_scale = 1.0f;             // moe_router_topk_scaling_factor: probs scaled after the score
};

// Per token (router.cpp's router_forward after its product, step for step): plain [T, k] the k
// largest logits, largest first, ties to the lower expert; chosen [T, k] the same, or with `bias`
// [E] (may be null) the k largest biased selection scores (in double, as the CPU); scores [T, E]
// the aux loss's scores; probs [T, k]; lse [T] the logits' logsumexp. With groups, chosen is the
// top-k among the experts of each token's g best groups (router.cpp's group_candidates), with
// selection [T, E] and group_scores [T, G + E] as scratch (else both may be null).
void route_tokens(const RouteShape& s, const float* logits, const float* bias, int32_t* chosen,
                  int32_t* plain, float* scores, float* probs, float* lse, double* selection,
                  double* group_scores, cudaStream_t stream);

// dlogits [T, E] (written), router.cpp's router_backward: from dprobs [T, k]; with aux_counts
// [E] (null: no aux loss) the aux loss's gradient aux_factor * count_e per score; with z_grad
// != 0 the z-loss's, z_grad * lse_t * softmax(z_t).
void router_backward(const RouteShape& s, const float* logits, const float* scores, const float* probs,
                     const float* lse, const int32_t* chosen, const float* dprobs, const int64_t* aux_counts,
                     double aux_factor, float z_grad, float* dlogits, cudaStream_t stream);

// counts [E] (written): how many of the `pairs` ids are e.
void count_by_expert(int64_t pairs, int64_t experts, const int32_t* ids, int64_t* counts,
                     cudaStream_t stream);

// out [cols] (written): the column sums of x [rows, cols] (of x^2 when `square`), in double, in an
// order fixed by the sizes.
void column_sums(int64_t rows, int64_t cols, const float* x, bool square, double* out, cudaStream_t stream);

// The permutation (sort_by_expert.hpp in one block): offsets [E + 1], row_token [rows], row_pair
// [rows] (may be null) and slot_row [T k] (written) from chosen [T k]; kept [T k]: 0 for a pair
// a capacity dropped, or null (dropless); cursor: scratch of sort_scratch(E) elements.
int64_t sort_scratch(int64_t experts);
void sort_by_expert(int64_t pairs, int64_t topk, int64_t experts, const int32_t* chosen, const uint8_t* kept,
                    int64_t* cursor, int64_t* offsets, int64_t* row_token, int64_t* row_pair,
                    int64_t* slot_row, cudaStream_t stream);

// kept [T k] (written): 1 for the pairs each expert keeps under `capacity` (sort::keeps), from
// the dropless permutation's offsets, row_pair and slot_row.
void keep_within_capacity(int64_t pairs, int64_t capacity, bool by_position, const int32_t* chosen,
                          const float* probs, const int64_t* offsets, const int64_t* row_pair,
                          const int64_t* slot_row, uint8_t* kept, cudaStream_t stream);

// x_perm[r] = x[row_token[r]] for r < rows (rows of `cols`).
void gather_rows(int64_t rows, int64_t cols, const int64_t* row_token, const float* x, float* x_perm,
                 cudaStream_t stream);

// y[t] = sum_j w_tj rows[slot_row[t k + j]] (+ add[t] when add is not null), the choices in order;
// w = probs (null: 1). The unpermute's combine, and the permutation's backward.
void combine_rows(int64_t tokens, int64_t topk, int64_t cols, const int64_t* slot_row, const float* rows,
                  const float* probs, const float* add, float* y, cudaStream_t stream);

// dy_perm[r] = probs[t, j] dy[t] and dprobs[t, j] = dy[t] . y_perm[r], r = slot_row[t k + j].
void unpermute_backward(int64_t tokens, int64_t topk, int64_t cols, const int64_t* slot_row, const float* dy,
                        const float* y_perm, const float* probs, float* dy_perm, float* dprobs,
                        cudaStream_t stream);

}  // namespace plexus::moe::cuda

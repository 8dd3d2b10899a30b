// Causal self-attention over a sequence split across the "cp" group, Megatron's load-balanced
// layout: the sequence is cut into 2 cp chunks of L tokens and cp rank r holds chunks r and
// 2 cp - 1 - r, in that order, so every rank has the same share of the causal work.
//
// The work is done block by block: this rank's queries against one rank's keys and values (its
// "kv block", packed [batch, seq, groups, 2, head_dim]), each query seeing the keys at global
// positions not after its own, merged into running softmax rows (max, sum and the unnormalized
// output, in double) so that the result is exact whatever the order of the blocks. Against a
// block, a query chunk sees a key chunk whole, not at all, or (its own chunk) causally: only the
// visible pairs are computed, each as L x L x head_dim products (BLAS). The backward recomputes
// the probabilities from each row's log-sum-exp and returns the block's key and value gradients
// for its owner.
//
// How the blocks travel (model.cp_comm_type, Megatron's names) is the attention layer's:
//   p2p         a ring: at step i a rank holds the block of rank r - i while the next one is
//               already on its way (sent to r + 1, received from r - 1); in the backward the block
//               travels with its key and value gradients, which reach the owner after a full turn;
//   all_gather  every block gathered at once, the gradients summed back by a reduce-scatter.
#pragma once

#include <cstdint>
#include <vector>

#include "plexus/cpp/context_parallel.hpp"

namespace plexus::transformer {

struct ContextParallelLayout {
  int64_t batch = 0, seq = 0;  // this rank's tokens: [batch, seq], seq = 2 L
  int64_t heads = 0, groups = 0, head_dim = 0;
  int32_t rank = 0, size = 1;                                       // in the cp group
  int64_t rows() const { return (heads + 2 * groups) * head_dim; }  // a qkv row
  int64_t kv_cols() const { return 2 * groups * head_dim; }         // a packed kv row
  int64_t tokens() const { return batch * seq; }
};

// The global position of token t (0 <= t < seq) of cp rank `rank` (the host's layout).
using plexus::sdk::context_parallel_position;

// RoPE on the heads at `cols` of this rank's rows [batch, seq, ld], each row at its token's global
// position (the tables cover the whole sequence); inverse: the backward's rotation.
template <class T>
void rope_at_global_positions(const ContextParallelLayout& l, T* x, int64_t ld, const int64_t* cols,
                              int64_t num_heads, const T* cos_table, const T* sin_table, bool inverse);

// kv [tokens, kv_cols] from qkv [tokens, rows] (Megatron's layout: per group its query heads, then
// its key and its value).
template <class T>
void pack_kv(const ContextParallelLayout& l, const T* qkv, T* kv);
// Adds the packed key and value gradients dkv into dqkv's key and value columns.
template <class T>
void add_kv_gradient(const ContextParallelLayout& l, const T* dkv, T* dqkv);

// The running softmax of this rank's query rows, [batch, heads, seq] (acc: x head_dim).
struct SoftmaxRows {
  std::vector<double> max, sum, acc;
  explicit SoftmaxRows(const ContextParallelLayout& l);
};

// Merges this rank's queries (qkv) against rank `source`'s kv block into rows.
template <class T>
void attend_block(const ContextParallelLayout& l, const T* qkv, const T* kv, int32_t source,
                  SoftmaxRows& rows);
// o [tokens, heads x head_dim] and lse [batch, heads, seq] from the merged rows.
template <class T>
void finish_rows(const ContextParallelLayout& l, const SoftmaxRows& rows, T* o, double* lse);

// The backward against rank `source`'s kv block: adds the query gradients into dqkv's query
// columns and the block's key and value gradients into dkv [tokens, kv_cols].
template <class T>
void attend_block_backward(const ContextParallelLayout& l, const T* qkv, const T* kv, int32_t source,
                           const T* o, const double* lse, const T* d_o, T* dqkv, T* dkv);

}  // namespace plexus::transformer

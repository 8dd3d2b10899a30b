// plexus_kernels: scaled-dot-product attention with grouped query heads, causal (the default) or
// bidirectional, on the CPU.
//
// For batch b, query head h (of `heads`), kv group g = h / (heads / groups):
//   S = Q_h K_g^T * scale   (scale = 1 / sqrt(head_dim)),  causal: key position t > query s masked
//   P = softmax(S) row-wise (max-subtracted, in T),         O_h = P V_g
// `causal` (default true) applies the causal mask; false is bidirectional attention (Megatron-LM's
// AttnMaskType.no_mask, as in its CLIP ViT): nothing is masked, every query sees all `seq` keys of
// its sequence and each softmax row runs over all of them.
// Q, K and V are read in place from one buffer with row stride `ld` (one row per token, b * seq + s):
//   query head h = g * per + j (per = heads / groups) starts at column q_offset + g * q_group_stride + j *
//   head_dim, key head g at k_offset + g * kv_group_stride, value head g at v_offset + g * kv_group_stride.
// Megatron's fused qkv layout is q_offset = 0, k_offset = per * hd, v_offset = (per + 1) * hd,
// q_group_stride = kv_group_stride = (per + 2) * hd, ld = (heads + 2 * groups) * hd.
// The output O is [batch * seq, heads * head_dim] with head h at columns h * head_dim (head-major).
//
// Work: queries are processed in blocks of rows; with the causal mask a block only multiplies with
// the keys up to its last row, so about half of the full S x S products are skipped (without it, a
// block multiplies with all S keys: the full S x S work). One BLAS call per block and head; OpenMP
// parallel over (batch, head) in forward and (batch, group) in backward (so the key/value
// gradients of a group have one writer).
#pragma once

#include <cstdint>

namespace plexus::kernels {

struct AttentionLayout {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t groups = 0;
  int64_t head_dim = 0;
  int64_t ld = 0;
  int64_t q_offset = 0;
  int64_t k_offset = 0;
  int64_t v_offset = 0;
  int64_t q_group_stride = 0;
  int64_t kv_group_stride = 0;
  // true: the causal mask (query s sees keys 0..s); false: bidirectional (every query sees all
  // seq keys, Megatron-LM's AttnMaskType.no_mask). megatron() leaves it true.
  bool causal = true;

  static AttentionLayout megatron(int64_t batch, int64_t seq, int64_t heads, int64_t groups,
                                  int64_t head_dim);
  int64_t q_column(int64_t head) const;
  int64_t k_column(int64_t group) const;
  int64_t v_column(int64_t group) const;
  // Throws std::invalid_argument when the sizes are inconsistent.
  void validate() const;
};

// qkv: the buffer described by `layout`; out: [batch * seq, heads * head_dim] (written).
// probs: [batch, heads, seq, seq] (written: row s holds P[s, 0..s] and zeros after; without the
// causal mask all seq entries of P[s]), or null when no backward will follow (then per-thread
// scratch is used).
template <class T>
void attention_forward(const AttentionLayout& layout, const T* qkv, T* out, T* probs);

// Given forward's qkv, probs and out, and dout (the gradient of out, same layout as out), writes
// the gradients of q, k and v into dqkv (same layout as qkv; only the q, k and v columns are
// written, each fully).
template <class T>
void attention_backward(const AttentionLayout& layout, const T* qkv, const T* probs, const T* out,
                        const T* dout, T* dqkv);

}  // namespace plexus::kernels

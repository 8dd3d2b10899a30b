// plexus_cuda_kernels: causal scaled-dot-product attention with grouped query heads, on the GPU
// (plexus_kernels/attention.hpp, same layout and formulas).
//
// For batch b, query head h (of `heads`), kv group g = h / (heads / groups):
//   S = Q_h K_g^T * scale   (scale = 1 / sqrt(head_dim)),  causal: key position t > query s masked
//   P = softmax(S) row-wise (max-subtracted, fp32),         O_h = P V_g
// Q, K and V are read in place from one buffer with row stride `ld` (one row per token, b * seq + s):
//   query head h = g * per + j (per = heads / groups) starts at column q_offset + g * q_group_stride + j *
//   head_dim, key head g at k_offset + g * kv_group_stride, value head g at v_offset + g * kv_group_stride.
// Megatron's fused qkv layout is q_offset = 0, k_offset = per * hd, v_offset = (per + 1) * hd,
// q_group_stride = kv_group_stride = (per + 2) * hd, ld = (heads + 2 * groups) * hd.
// The output O is [batch * seq, heads * head_dim] with head h at columns h * head_dim.
//
// Work: per head, cuBLAS strided-batched products over the batch (full S x S scores, so about
// twice the masked minimum) and a masked-softmax kernel; the probabilities are kept [batch, heads,
// seq, seq] in T like the CPU version. Scores and dP are fp32 (scratch [batch, seq, seq]); with
// bf16, P and dS are rounded to bf16 as the inputs of the following products, and the key/value
// gradients of a group accumulate over its heads in fp32 scratch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "plexus_cuda_kernels/handle.hpp"

namespace plexus::cuda_kernels {

// The same fields and meaning as plexus::kernels::AttentionLayout (kept separate so this library
// does not depend on the CPU one).
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

  static AttentionLayout megatron(int64_t batch, int64_t seq, int64_t heads, int64_t groups,
                                  int64_t head_dim) {
    AttentionLayout l;
    l.batch = batch;
    l.seq = seq;
    l.heads = heads;
    l.groups = groups;
    l.head_dim = head_dim;
    const int64_t per = groups > 0 ? heads / groups : 0;
    l.ld = (heads + 2 * groups) * head_dim;
    l.q_offset = 0;
    l.k_offset = per * head_dim;
    l.v_offset = (per + 1) * head_dim;
    l.q_group_stride = (per + 2) * head_dim;
    l.kv_group_stride = (per + 2) * head_dim;
    return l;
  }
  int64_t q_column(int64_t head) const {
    const int64_t per = heads / groups;
    return q_offset + (head / per) * q_group_stride + (head % per) * head_dim;
  }
  int64_t k_column(int64_t group) const { return k_offset + group * kv_group_stride; }
  int64_t v_column(int64_t group) const { return v_offset + group * kv_group_stride; }
  // Throws std::invalid_argument when the sizes are inconsistent.
  void validate() const {
    if (batch < 0 || seq < 0 || heads <= 0 || groups <= 0 || head_dim <= 0 || heads % groups != 0)
      throw std::invalid_argument("attention: invalid sizes (batch " + std::to_string(batch) + ", seq " +
                                  std::to_string(seq) + ", heads " + std::to_string(heads) + ", groups " +
                                  std::to_string(groups) + ", head_dim " + std::to_string(head_dim) + ")");
    const int64_t last =
        std::max({q_column(heads - 1), k_column(groups - 1), v_column(groups - 1)}) + head_dim;
    if (ld < last)
      throw std::invalid_argument("attention: row stride " + std::to_string(ld) +
                                  " is shorter than the last head's end " + std::to_string(last));
  }
};

// qkv: the buffer described by `layout`; out: [batch * seq, heads * head_dim] (written).
// probs: [batch, heads, seq, seq] (written: row s holds P[s, 0..s] and zeros after), or null when
// no backward will follow (then the handle's scratch holds one head at a time).
template <class T>
void attention_forward(Handle& handle, const AttentionLayout& layout, const T* qkv, T* out, T* probs);

// Given forward's qkv, probs and out, and dout (the gradient of out, same layout as out), writes
// the gradients of q, k and v into dqkv (same layout as qkv; only the q, k and v columns are
// written, each fully).
template <class T>
void attention_backward(Handle& handle, const AttentionLayout& layout, const T* qkv, const T* probs,
                        const T* out, const T* dout, T* dqkv);

}  // namespace plexus::cuda_kernels

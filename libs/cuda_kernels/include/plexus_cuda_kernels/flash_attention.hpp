// plexus_cuda_kernels: fused (flash-style) causal grouped-query attention in bf16, the same
// function as attention.hpp's for the same layout, without the [batch, heads, seq, seq]
// probabilities in memory.
//
// The forward walks the keys in tiles of 64 per tile of 64 queries (only the tiles at or below the
// diagonal), keeps the scores of one tile in registers, and folds them into the output with the
// running row maximum and sum (online softmax). What it keeps for the backward is one number per
// query row: the log of the softmax's denominator, in base 2 of the scaled scores
// (lse2 = max + log2(sum of 2^(s * scale * log2 e - max))). The backward recomputes P = 2^(s *
// scale * log2 e - lse2) per tile of 64 keys and 32 queries, accumulates the tile's key and value
// gradients over every query tile and every head of its group in registers, and adds the query
// gradients into an fp32 buffer (atomics) that a last pass rounds into dqkv.
//
// Products run on the tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulation), so the
// numbers are the cuBLAS path's up to the order of the sums and one difference in rounding: P is
// rounded to bf16 before it is normalized (the cuBLAS path rounds the normalized P).
//
// Served: bf16, head_dim 64 or 128, columns and row stride multiples of 8 elements (16-byte
// rows), a device of compute capability 8.0 or newer. flash_attention_supported says whether a
// layout is; the kernels refuse (std::invalid_argument) what it does not serve.
#pragma once

#include <cstdint>

#include "plexus_cuda_kernels/attention.hpp"
#include "plexus_cuda_kernels/handle.hpp"
#include "plexus_cuda_kernels/types.hpp"

namespace plexus::cuda_kernels {

// True when the fused kernels serve `layout` on the handle's device.
bool flash_attention_supported(const Handle& handle, const AttentionLayout& layout);

// out: [batch * seq, heads * head_dim] (written); lse2: [batch, heads, seq] fp32 (written; null
// for a forward without backward).
void flash_attention_forward(Handle& handle, const AttentionLayout& layout, const bfloat16* qkv,
                             bfloat16* out, float* lse2);

// Given forward's qkv, out and lse2, and dout (the gradient of out), writes the gradients of q, k
// and v into dqkv (same layout as qkv; every q, k and v column written).
void flash_attention_backward(Handle& handle, const AttentionLayout& layout, const bfloat16* qkv,
                              const bfloat16* out, const bfloat16* dout, const float* lse2, bfloat16* dqkv);

}  // namespace plexus::cuda_kernels

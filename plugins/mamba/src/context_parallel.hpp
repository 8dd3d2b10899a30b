// mamba.mixer under context parallelism, head-parallel as Megatron-LM runs it
// (ssm/mamba_context_parallel.py): the convolution and the scan need whole sequences, so each cp
// rank takes 1/cp of the heads (and of the groups) over the whole sequence, and the ranks' parts
// of out_proj's output are summed back to each rank's chunks of the tokens.
//
// Where Megatron exchanges in_proj's outputs by all-to-all (local tokens, all heads -> all tokens,
// its heads), this layer all-gathers the hidden states (d_model per token, against Megatron's
// in_proj width / cp) and computes in_proj's rows of its own heads for every token: the same
// products, one collective of comparable size. The layout's chunks (rank r holds chunks r and
// 2 cp - 1 - r) are put back in sequence order for the mixer and taken out again after it.
//
// The parameters stay whole and replicated over cp (the host averages their gradients over
// dp x cp): each rank computes with its heads' slices, laid out as a tensor-parallel shard of the
// same slices (params.cpp's split markers, the rule of plx_param_spec.tp_part_sizes), and adds its
// slices' gradients into the whole gradient. A slice's gradient is complete on the rank that owns
// it (every rank's output gradient is gathered), so the average over cp is the true one. A whole
// parameter (the pre-norm) gets the same complete gradient on every rank: it is added / cp.
#pragma once

#include <cstdint>

#include "plexus/layer.h"

namespace plexus::mamba {

// The rows of every cp rank's chunks, gathered rank-major ([ranks][batch][seq_local][cols]), put
// in sequence order [batch][ranks x seq_local][cols]; and back.
template <class T>
void cp_rows_to_sequence(const T* rank_major, T* sequence, int64_t batch, int64_t seq_local, int64_t cols,
                         int32_t ranks);
template <class T>
void cp_rows_to_rank_major(const T* sequence, T* rank_major, int64_t batch, int64_t seq_local, int64_t cols,
                           int32_t ranks);

// Rank `rank`'s slice of `whole` by `shard`'s split (its desc is the slice's shape; without
// PLX_PARAM_TENSOR_PARALLEL the whole tensor) into `out`; and the slice's gradient, times scale,
// added into the whole gradient.
template <class T>
void cp_take_slice(const plx_param_spec& shard, const T* whole, int32_t rank, int32_t ranks, T* out);
template <class T>
void cp_add_slice(const plx_param_spec& shard, const T* slice, int32_t rank, int32_t ranks, T scale,
                  T* whole);

}  // namespace plexus::mamba

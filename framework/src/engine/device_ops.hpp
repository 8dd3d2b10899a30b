// The engine's own arithmetic on tensors of any device: on the CPU the threaded loops of
// vector_ops.hpp, on a CUDA device the kernels of plexus_cuda_kernels (on the default stream,
// where the layers also run). Parameters, gradients and optimizer state are float32; activations
// (add_into, first_non_finite, the mHC streams) are float32, or on a GPU also bfloat16
// (run.precision "bf16"); the tensors of one call share one dtype. Results that the host needs
// (an index, a norm) are copied back, which synchronizes.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/vector_ops.hpp"
#include "plexus/core/engine/tensor.hpp"

namespace plexus::device_ops {

// into += from
void add_into(Tensor& into, const Tensor& from);
// The index of the first NaN or infinity, or -1 (float32, and bfloat16 on a GPU; -1 for any other
// dtype, which has no non-finite values to find or is not an activation).
int64_t first_non_finite(const Tensor& t);
// first_non_finite of each tensor (all on one device). On a GPU the searches are queued together
// and read back once: one synchronization for a model's gradients instead of one per tensor.
std::vector<int64_t> first_non_finite_each(const std::vector<const Tensor*>& tensors);
// The sum of the squares of every element of every tensor (all on one device), in tensor order:
// the squared gradient norm. On a GPU one result is accumulated there and read back once.
double sum_of_squares(const std::vector<const Tensor*>& tensors);
void adamw_update(const vector_ops::AdamWStep& step, Tensor& weight, const Tensor& grad, Tensor& exp_avg,
                  Tensor& exp_avg_sq);
// The mHC streams x[T, n, C] (vector_ops.hpp): expand, sum, mean and spread.
void expand_streams(const Tensor& e, int64_t tokens, int64_t streams, int64_t hidden, Tensor& x);
void sum_streams(const Tensor& dx, int64_t tokens, int64_t streams, int64_t hidden, Tensor& de);
void mean_streams(const Tensor& x, int64_t tokens, int64_t streams, int64_t hidden, Tensor& h);
void spread_streams(const Tensor& dh, int64_t tokens, int64_t streams, int64_t hidden, Tensor& dx);

// Host <-> tensor for small values: element 0 of a float32 tensor, and writing n floats.
float read_scalar(const Tensor& t);
void write_floats(Tensor& t, const float* values, int64_t n);
// One element, on the tensors' device without a trip through the host: dst[i] = src[j], and
// dst[i] += src[j] (the mHC gates: three [1] parameters that the family takes as one [3]).
void copy_element(Tensor& dst, int64_t i, const Tensor& src, int64_t j);
void add_element(Tensor& dst, int64_t i, const Tensor& src, int64_t j);

}  // namespace plexus::device_ops

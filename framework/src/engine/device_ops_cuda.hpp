// The CUDA side of device_ops.hpp: device_ops_cuda.cpp in a build with CUDA (over
// plexus_cuda_kernels), device_ops_absent.cpp without (never reached: no CUDA tensor exists).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/vector_ops.hpp"
#include "plexus/core/engine/tensor.hpp"

namespace plexus::device_ops::cuda {

void add_into(Tensor& into, const Tensor& from);
int64_t first_non_finite(const Tensor& t);
std::vector<int64_t> first_non_finite_each(const std::vector<const Tensor*>& tensors);
double sum_of_squares(const std::vector<const Tensor*>& tensors);
void add_element(Tensor& dst, int64_t i, const Tensor& src, int64_t j);
void adamw_update(const vector_ops::AdamWStep& step, Tensor& weight, const Tensor& grad, Tensor& exp_avg,
                  Tensor& exp_avg_sq);
void expand_streams(const Tensor& e, int64_t tokens, int64_t streams, int64_t hidden, Tensor& x);
// out[t, :] = scale * sum_j x[t, j, :]
void reduce_streams(const Tensor& x, int64_t tokens, int64_t streams, int64_t hidden, float scale,
                    Tensor& out);
// dx[t, j, :] = dh[t, :] / streams
void spread_streams(const Tensor& dh, int64_t tokens, int64_t streams, int64_t hidden, Tensor& dx);

}  // namespace plexus::device_ops::cuda

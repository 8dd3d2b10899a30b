// plexus_cuda_kernels: reductions for the engine: the sum of squares behind the global gradient
// norm, and detection of non-finite values (NaN or infinity).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "plexus_cuda_kernels/handle.hpp"

namespace plexus::cuda_kernels {

// *result (device double) = sum of x[i]^2, or *result += it when accumulate (one result over
// many tensors, in call order). Each square is exact in double (as in the CPU optimizer); the sum
// is deterministic: a first pass with a grid chosen from n alone (never from the device) writes one
// partial per block to scratch, a second single-block pass adds them in a fixed tree order.
template <class T>
void sum_squares(Handle& handle, int64_t n, const T* x, double* result, bool accumulate);

// *first (device) = the index of the first NaN or infinite element of x, or -1 when there is none
// (an atomic minimum, so the answer does not depend on scheduling). No synchronization.
template <class T>
void first_non_finite(int64_t n, const T* x, int64_t* first, cudaStream_t stream);

// Whether x holds a NaN or an infinity; synchronizes the handle's stream to answer.
template <class T>
bool has_non_finite(Handle& handle, int64_t n, const T* x);

}  // namespace plexus::cuda_kernels

// The CUDA versions of the eight primitives. A is the activation type: float or
// cuda_kernels::bfloat16; mappings are always float32 (the family's mapping dtype with either).
// Each runs on handle.stream() with every tensor on the handle's device (backend.cpp makes the
// device current, binds the stream and picks A from the dtype), enqueues its kernels and returns
// without waiting. The problem and arguments were checked by plexus/cpp/mhc.hpp. Plain C++, for
// backend.cpp; the definitions are in the .cu file of each primitive.
#pragma once

#include "../fused.hpp"
#include "plexus_cuda_kernels/handle.hpp"
#include "plexus_cuda_kernels/types.hpp"

namespace plexus::mhc_fused::gpu {

using cuda_kernels::bfloat16;
using cuda_kernels::Handle;

template <class A>
void proj_rms_forward(Handle& handle, const MhcProblem& p, const plx_mhc_proj_rms_forward_args& a);
template <class A>
void proj_rms_backward(Handle& handle, const MhcProblem& p, const plx_mhc_proj_rms_backward_args& a);
void mappings_forward(Handle& handle, const MhcProblem& p, const plx_mhc_mappings_forward_args& a);
void mappings_backward(Handle& handle, const MhcProblem& p, const plx_mhc_mappings_backward_args& a);
template <class A>
void aggregate_forward(Handle& handle, const MhcProblem& p, const plx_mhc_aggregate_forward_args& a);
template <class A>
void aggregate_backward(Handle& handle, const MhcProblem& p, const plx_mhc_aggregate_backward_args& a);
template <class A>
void post_res_forward(Handle& handle, const MhcProblem& p, const plx_mhc_post_res_forward_args& a);
template <class A>
void post_res_backward(Handle& handle, const MhcProblem& p, const plx_mhc_post_res_backward_args& a);

}  // namespace plexus::mhc_fused::gpu

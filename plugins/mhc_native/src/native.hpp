// mhc_native: the readable reference implementation of the "mhc" family (plexus/mhc.h) on the
// CPU, float32 and float64. Each primitive is written as the sequence of eager operations a
// framework would run for docs/mhc-backend.md's formulas: one pass over memory per step, with
// whole-batch temporaries, so that each line can be checked against the math. The fused backend
// is checked against this one.
//
// The functions below are called with a problem and arguments that plexus/cpp/mhc.hpp has
// already checked (shapes, dtypes, one device, contiguity); T is the activation dtype, which on
// the CPU is also the mapping dtype (float32 with float32, float64 with float64).
#pragma once

#include <cstdint>

#include "plexus/cpp/mhc.hpp"

namespace plexus::mhc_native {

using plexus::sdk::MhcProblem;

// Long reductions (over C, n*C or T) accumulate in double, whatever T is: the reference should
// not add rounding of its own beyond storing each step's result in T.
using Acc = double;

// Typed tensor data: the SDK's accessors (plexus/cpp/mhc.hpp).
using plexus::sdk::mhc_in;
using plexus::sdk::mhc_in_if;
using plexus::sdk::mhc_out;
using plexus::sdk::mhc_out_if;

template <class T>
void proj_rms_forward(const MhcProblem& p, const plx_mhc_proj_rms_forward_args& a);
template <class T>
void proj_rms_backward(const MhcProblem& p, const plx_mhc_proj_rms_backward_args& a);
template <class T>
void mappings_forward(const MhcProblem& p, const plx_mhc_mappings_forward_args& a);
template <class T>
void mappings_backward(const MhcProblem& p, const plx_mhc_mappings_backward_args& a);
template <class T>
void aggregate_forward(const MhcProblem& p, const plx_mhc_aggregate_forward_args& a);
template <class T>
void aggregate_backward(const MhcProblem& p, const plx_mhc_aggregate_backward_args& a);
template <class T>
void post_res_forward(const MhcProblem& p, const plx_mhc_post_res_forward_args& a);
template <class T>
void post_res_backward(const MhcProblem& p, const plx_mhc_post_res_backward_args& a);

}  // namespace plexus::mhc_native

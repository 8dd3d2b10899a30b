// mhc_native: the readable reference implementation of the "mhc" family (plexus/mhc.h) on the
// CPU, float32 and float64. Each primitive is written as the sequence of eager operations a
// framework would run for docs/mhc-backend.md's formulas: one pass over memory per step, with
// whole-batch temporaries, so that each line can be checked against the math. The fused backend
// is checked against this one.
//
// The primitives are called by the SDK's scaffold (plexus/cpp/mhc_backend.hpp, see plugin.cpp)
// with a problem and arguments that plexus/cpp/mhc.hpp has already checked (shapes, dtypes, one
// device, contiguity); T is the activation dtype, which on the CPU is also the mapping dtype
// (float32 with float32, float64 with float64).
#pragma once

#include <cstdint>

#include "plexus/cpp/mhc_backend.hpp"

namespace plexus::mhc_native {

// The eight primitives on the CPU, CpuPrimitives<T>::proj_rms_forward and so on, one file per
// forward/backward pair (src/<pair>.cpp) where they are instantiated for float and double; and
// the names they are written with (MhcProblem, mhc_in, mhc_out, ...).
PLEXUS_MHC_PRIMITIVES(CpuPrimitives);

// Long reductions (over C, n*C or T) accumulate in double, whatever T is: the reference should
// not add rounding of its own beyond storing each step's result in T.
using Acc = double;

}  // namespace plexus::mhc_native

// mhc_fused: the "mhc" family (plexus/mhc.h) on the CPU, float32 and float64, computed with the
// fewest passes over memory: each primitive reads every element of its large inputs once from
// memory and writes every element of its outputs once, doing all the arithmetic of the
// formulas while the data is in cache or registers (README.md lists the passes per primitive).
//
// The primitives are called by the SDK's scaffold (plexus/cpp/mhc_backend.hpp, see plugin.cpp)
// with a problem and arguments that plexus/cpp/mhc.hpp has already checked (shapes, dtypes, one
// device, contiguity); T is the activation dtype, which on the CPU is also the mapping dtype
// (float32 with float32, float64 with float64).
#pragma once

#include <cstdint>

#include "plexus/cpp/mhc_backend.hpp"

namespace plexus::mhc_fused {

// The eight primitives on the CPU, CpuPrimitives<T>::proj_rms_forward and so on, one file per
// forward/backward pair (src/<pair>.cpp) where they are instantiated for float and double; and
// the names they are written with (MhcProblem, mhc_in, mhc_out, ...).
PLEXUS_MHC_PRIMITIVES(CpuPrimitives);

// Long reductions (over C, n*C or the tokens) accumulate in double whatever T is, as the
// reference does: float32 sums of thousands of terms would lose digits the reference keeps.
using Acc = double;

}  // namespace plexus::mhc_fused

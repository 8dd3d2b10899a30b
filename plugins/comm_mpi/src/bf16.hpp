// bfloat16 for the reductions MPI does not have: each value is widened to float32 exactly, the
// two operands are combined in float32 and the result is rounded back to nearest-even. So every
// combining step of the reduction tree rounds once, as a bf16 add on a GPU does.
#pragma once

#include <cstdint>
#include <cstring>

namespace plexus::comm_mpi {

inline float bf16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float f = 0.0f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace plexus::comm_mpi

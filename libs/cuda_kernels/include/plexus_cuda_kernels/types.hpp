// plexus_cuda_kernels: the element types of the interface.
//
// Activations are float or bfloat16; parameters, gradients of parameters and optimizer state are
// float. `bfloat16` is the storage of one CUDA __nv_bfloat16 (same size and bits) as a plain C++
// type, so these headers stay free of CUDA syntax and plain .cpp files can include them.
#pragma once

#include <bit>
#include <cstdint>

namespace plexus::cuda_kernels {

struct bfloat16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bfloat16) == 2, "bfloat16 must have the layout of __nv_bfloat16");

// float -> bfloat16 rounding to nearest, ties to even: the same rounding as the device's
// __float2bfloat16_rn, so host-side references can reproduce device conversions bit for bit.
// NaN stays a (quiet) NaN; values beyond the largest bfloat16 round to infinity.
constexpr bfloat16 to_bfloat16(float value) noexcept {
  const auto u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return bfloat16{static_cast<uint16_t>(rounded >> 16)};
}

// Exact: every bfloat16 is a float.
constexpr float to_float(bfloat16 value) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(value.bits) << 16);
}

}  // namespace plexus::cuda_kernels

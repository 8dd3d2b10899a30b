// The calling thread's floating-point mode for subnormal numbers (see device.hpp,
// flush_denormals).
#include <cstdint>

#include "plexus/core/device.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h>  // _MM_SET_DENORMALS_ZERO_MODE (SSE3)
#include <xmmintrin.h>  // _MM_SET_FLUSH_ZERO_MODE
#endif

namespace plexus::device {

bool flush_denormals() {
#if defined(__x86_64__) || defined(__i386__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);          // results below FLT_MIN become 0
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);  // and so do such inputs
  return true;
#elif defined(__aarch64__)
  uint64_t fpcr = 0;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  fpcr |= uint64_t{1} << 24;  // FZ: flush subnormal inputs and results to zero
  __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
  return true;
#else
  return false;
#endif
}

}  // namespace plexus::device

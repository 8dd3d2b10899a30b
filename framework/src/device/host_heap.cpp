// The process's heap policy for training (see device.hpp, retain_freed_host_memory).
#include <cstdlib>
#include <cstring>

#include "plexus/core/device.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace plexus::device {

bool retain_freed_host_memory() {
#if defined(__GLIBC__)
  // A user's own GLIBC_TUNABLES malloc settings win.
  if (const char* tunables = std::getenv("GLIBC_TUNABLES");
      tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr)
    return false;
  // glibc serves large blocks with mmap and hands freed memory at the top of the heap back to the
  // kernel past a trim threshold of a few MiB. A training step frees all its activations at the
  // end, so the next step got them back as fresh pages and paid a page fault for every 4 KiB it
  // touched (about 9% of the CPU time of an mHC step, measured with perf). Blocks up to glibc's
  // 32 MiB limit now come from the heap, and freed memory stays there for the next step.
  // Setting either value also fixes the other (glibc otherwise adapts both), so both are set.
  // Blocks above that limit (a 50k-vocabulary head's logits and their gradient: 206 MB each per
  // 1,024 tokens) were still mapped and unmapped every step; at C=768, V=50304 that cost 7% of the
  // step. With mmap off for the heap (M_MMAP_MAX 0) they come from the heap too; files mapped
  // with mmap() itself are not affected.
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kTrimThreshold = 1 << 30;
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1 &&
         mallopt(M_MMAP_MAX, 0) == 1;
#else
  return false;
#endif
}

}  // namespace plexus::device

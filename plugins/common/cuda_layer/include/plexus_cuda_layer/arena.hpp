// Device memory for what a layer keeps between forward and backward (a state's xhat, qkv,
// probabilities, ...) and for one call's temporaries, from the host's allocator.
//
// Why the host's allocator and not cudaMalloc: on CUDA it is the engine's caching allocator, so
// memory freed at the end of a microbatch is handed out again to the next without cudaMalloc or
// cudaFree (which synchronizes the device), temporaries are shared with the rest of the model
// instead of held per layer, and everything counts in the engine's statistics and its
// out-of-memory handling (which empties the cache and retries).
//
// The host's allocate/free carry no stream: its blocks are ordered on the device's default
// stream (a block freed there is at once handed out again to work on that stream). A layer's
// work may run on another stream, the call's compute stream, so an Arena orders itself against
// the default stream at both ends: work queued after taking a block waits for what the default
// stream had queued (a previous owner may still be using the block), and before its blocks are
// freed the default stream waits for the work the arena's memory was last used by. Both are
// events, never host synchronizations, and nothing at all on the default stream itself.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "plexus/cpp/host.hpp"

namespace plexus::cuda_layer {

class Arena {
 public:
  explicit Arena(DLDevice device);
  ~Arena() { release(); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Room for n elements of T (uninitialized), for work on `stream`; nullptr when n is 0. The
  // block lives until release(). The device must be current (a call's Context::Scope).
  template <class T>
  T* take(std::size_t n, cudaStream_t stream) {
    return static_cast<T*>(take_bytes(n * sizeof(T), stream));
  }
  // The memory is next used by work on `stream` (a backward on another stream than its forward:
  // the handle already ordered the two streams, so this only moves where release() waits).
  void used_on(cudaStream_t stream) noexcept { stream_ = stream; }
  // Orders the default stream after the last use, then returns every block to the host.
  void release() noexcept;

 private:
  void* take_bytes(std::size_t bytes, cudaStream_t stream);
  // `later` waits for the work queued on `earlier` so far.
  void order(cudaStream_t earlier, cudaStream_t later);

  plexus::sdk::Host host_;
  DLDevice device_;
  cudaStream_t stream_ = nullptr;  // where the memory was last used
  cudaEvent_t event_ = nullptr;    // created on first use of a stream other than the default
  std::vector<void*> blocks_;
};

}  // namespace plexus::cuda_layer

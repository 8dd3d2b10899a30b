#include "plexus_cuda_layer/arena.hpp"

#include "plexus_cuda_kernels/current_device.hpp"
#include "plexus_cuda_kernels/error.hpp"

namespace plexus::cuda_layer {

Arena::Arena(DLDevice device) : host_(plexus::sdk::Host::current()), device_(device) {}

void Arena::order(cudaStream_t earlier, cudaStream_t later) {
  if (event_ == nullptr)
    PLEXUS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cuda_layer arena");
  // A wait captures the event's latest record, so one event serves every ordering in turn.
  PLEXUS_CUDA_CHECK(cudaEventRecord(event_, earlier), "cuda_layer arena");
  PLEXUS_CUDA_CHECK(cudaStreamWaitEvent(later, event_, 0), "cuda_layer arena");
}

void* Arena::take_bytes(std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  blocks_.reserve(blocks_.size() + 1);  // so that recording the block below cannot fail
  void* block = host_.alloc(device_, bytes);
  blocks_.push_back(block);
  if (stream != nullptr) order(nullptr, stream);
  stream_ = stream;
  return block;
}

void Arena::release() noexcept {
  if (blocks_.empty() && event_ == nullptr) return;
  try {
    const cuda_kernels::CurrentDevice guard(device_.device_id);
    if (!blocks_.empty() && stream_ != nullptr) order(stream_, nullptr);
  } catch (...) {
    // The ordering could not be queued (a failing context): wait for the whole device instead,
    // so no later owner of these blocks can run under work still using them.
    try {
      const cuda_kernels::CurrentDevice guard(device_.device_id);
      static_cast<void>(cudaDeviceSynchronize());
    } catch (...) {  // the device is unusable: nothing can run on the blocks any more
    }
  }
  // Destroying an event a stream still waits on is allowed: the wait stays in place.
  if (event_ != nullptr) static_cast<void>(cudaEventDestroy(event_));
  event_ = nullptr;
  for (void* block : blocks_) host_.free(device_, block);
  blocks_.clear();
  stream_ = nullptr;
}

}  // namespace plexus::cuda_layer

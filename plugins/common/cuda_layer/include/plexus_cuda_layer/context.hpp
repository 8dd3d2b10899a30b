// What one layer instance on a GPU owns for running its kernels, and the scope of one call.
//
// A layer has one plexus_cuda_kernels::Handle (a cuBLAS handle with its own 32 MiB workspace and
// the kernels' growable scratch), created on the layer's device. Calls may come on any stream
// (plx_forward_args::compute_stream): each call moves the handle to it, and the handle orders the
// work it queued on the previous stream before the new stream's, so the workspace, the scratch
// and the states' memory are never used by two streams at once. One handle serves one call at a
// time: calls into the same layer instance are serialized by a lock (different layers run
// concurrently, each with its own handle).
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <optional>

#include "plexus/host.h"
#include "plexus_cuda_kernels/current_device.hpp"
#include "plexus_cuda_kernels/handle.hpp"

namespace plexus::cuda_layer {

namespace ck = plexus::cuda_kernels;

class Context {
 public:
  // Refuses (Error(PLX_ERR_UNSUPPORTED), naming the component and the device) a device this
  // process cannot see; creates the handle on the device.
  Context(const char* component, DLDevice device);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  DLDevice device() const noexcept { return device_; }

  // One forward or backward: the layer's lock held, its device current, the handle bound to the
  // call's stream (the host's plx_stream through stream_native; NULL: the default stream).
  class Scope {
   public:
    Scope(Context& context, plx_stream stream);
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ck::Handle& handle() noexcept { return *context_.handle_; }
    cudaStream_t stream() const noexcept { return context_.handle_->stream(); }

   private:
    Context& context_;
    std::unique_lock<std::mutex> lock_;
    cuda_kernels::CurrentDevice guard_;
  };

 private:
  DLDevice device_;
  std::mutex mutex_;
  // Optional only so the destructor can release it with the device current.
  std::optional<ck::Handle> handle_;
};

// The CUDA stream behind a host stream (nullptr for NULL: the device's default stream).
cudaStream_t native_stream(plx_stream stream);

}  // namespace plexus::cuda_layer

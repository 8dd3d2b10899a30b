// plexus_cuda_kernels: the per-stream context of the kernels that need more than a stream.
//
// A Handle binds one CUDA stream on one device to a cuBLAS handle with its own workspace, the
// TF32 choice for fp32 products, and a growable device scratch buffer. Matrix products,
// attention and the kernels with deterministic multi-pass reductions take a Handle; purely
// elementwise kernels take a cudaStream_t. Everything a Handle launches is ordered on its stream,
// so its workspace and scratch are reused without races; use one Handle per stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

// cuBLAS's opaque handle (cublasHandle_t is `struct cublasContext*`), declared here so this header
// does not need cublas_v2.h.
struct cublasContext;

namespace plexus::cuda_kernels {

struct HandleOptions {
  // fp32 products use TF32 tensor cores only when allowed (10-bit mantissa inputs: ~1e-3 relative
  // error). Off by default so fp32 results compare with the CPU library's.
  bool allow_tf32 = false;
  // cuBLAS workspace, set explicitly so results do not depend on cuBLAS's shared default pool
  // (32 MiB is what cuBLAS recommends for Hopper).
  std::size_t blas_workspace_bytes = std::size_t{32} << 20;
};

class Handle {
 public:
  // Creates the cuBLAS handle on the current device, bound to `stream` (nullptr: the legacy
  // default stream). Throws CudaError when CUDA or cuBLAS cannot be initialized.
  explicit Handle(cudaStream_t stream = nullptr, HandleOptions options = {});
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  // A moved-from Handle may only be destroyed or assigned to.
  Handle(Handle&&) noexcept;
  Handle& operator=(Handle&&) noexcept;

  cudaStream_t stream() const noexcept;
  // Moves the handle to another stream of the same device. Work the handle queued on the old
  // stream is ordered before anything it queues on the new one (an event), because the new work
  // reuses the same workspace and scratch.
  void set_stream(cudaStream_t stream);
  int device() const noexcept;

  bool allow_tf32() const noexcept;
  void set_allow_tf32(bool allow) noexcept;

  // The cuBLAS handle, for callers that need cuBLAS calls of their own (bound to stream()).
  cublasContext* blas() const noexcept;

  // Device scratch of at least `bytes`, valid until the next scratch() call on this handle (the
  // kernels taking a Handle use it, so it is also invalidated by any of them). Growing waits for
  // the handle's stream before the old buffer is freed.
  void* scratch(std::size_t bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plexus::cuda_kernels

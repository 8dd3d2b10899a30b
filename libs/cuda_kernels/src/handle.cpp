#include "plexus_cuda_kernels/handle.hpp"

#include <algorithm>

#include "check.hpp"
#include "plexus_cuda_kernels/device_buffer.hpp"

namespace plexus::cuda_kernels {

struct Handle::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  bool allow_tf32 = false;
  DeviceBuffer workspace;
  DeviceBuffer scratch;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (blas != nullptr) static_cast<void>(cublasDestroy(blas));
  }

  // cublasSetStream resets cuBLAS's workspace to its default pool, so the explicit workspace is
  // set again after every stream change.
  void bind() {
    PLEXUS_CUBLAS_CHECK(cublasSetStream(blas, stream), "Handle");
    PLEXUS_CUBLAS_CHECK(cublasSetWorkspace(blas, workspace.data(), workspace.bytes()), "Handle");
  }
};

namespace {

// An event recorded on one stream and waited for by another, destroyed on every path.
class StreamOrder {
 public:
  StreamOrder(cudaStream_t before, cudaStream_t after) {
    PLEXUS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "Handle::set_stream");
    PLEXUS_CUDA_CHECK(cudaEventRecord(event_, before), "Handle::set_stream");
    PLEXUS_CUDA_CHECK(cudaStreamWaitEvent(after, event_, 0), "Handle::set_stream");
  }
  ~StreamOrder() {
    if (event_ != nullptr) static_cast<void>(cudaEventDestroy(event_));
  }
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

 private:
  cudaEvent_t event_ = nullptr;
};

// Scratch grows in steps of at least a quarter and in whole MiB, so a sequence of slightly larger
// requests does not reallocate (and synchronize) each time.
std::size_t grown_size(std::size_t current, std::size_t wanted) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const std::size_t target = std::max(wanted, current + current / 4);
  return (target + kMiB - 1) / kMiB * kMiB;
}

}  // namespace

Handle::Handle(cudaStream_t stream, HandleOptions options) : impl_(std::make_unique<Impl>()) {
  PLEXUS_CUDA_CHECK(cudaGetDevice(&impl_->device), "Handle");
  impl_->stream = stream;
  impl_->allow_tf32 = options.allow_tf32;
  PLEXUS_CUBLAS_CHECK(cublasCreate(&impl_->blas), "Handle");
  impl_->workspace = DeviceBuffer(options.blas_workspace_bytes);
  impl_->bind();
  // fp32 accumulation everywhere: forbid reductions in the output type (bf16) inside cuBLAS's
  // split-K algorithms. TF32 is chosen per call through the compute type (gemm.cpp).
  PLEXUS_CUBLAS_CHECK(
      cublasSetMathMode(
          impl_->blas,
          static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
      "Handle");
}

Handle::~Handle() = default;
Handle::Handle(Handle&&) noexcept = default;
Handle& Handle::operator=(Handle&&) noexcept = default;

cudaStream_t Handle::stream() const noexcept {
  return impl_->stream;
}

void Handle::set_stream(cudaStream_t stream) {
  if (stream == impl_->stream) return;
  const StreamOrder order(impl_->stream, stream);
  impl_->stream = stream;
  impl_->bind();
}

int Handle::device() const noexcept {
  return impl_->device;
}

bool Handle::allow_tf32() const noexcept {
  return impl_->allow_tf32;
}

void Handle::set_allow_tf32(bool allow) noexcept {
  impl_->allow_tf32 = allow;
}

cublasContext* Handle::blas() const noexcept {
  return impl_->blas;
}

void* Handle::scratch(std::size_t bytes) {
  if (bytes > impl_->scratch.bytes()) {
    // Kernels queued earlier on this stream may still use the old buffer.
    PLEXUS_CUDA_CHECK(cudaStreamSynchronize(impl_->stream), "Handle::scratch");
    const std::size_t size = grown_size(impl_->scratch.bytes(), bytes);
    impl_->scratch.reset();
    impl_->scratch = DeviceBuffer(size);
  }
  return impl_->scratch.data();
}

}  // namespace plexus::cuda_kernels

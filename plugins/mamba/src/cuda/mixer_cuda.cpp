// mamba.mixer on a CUDA device (device_impl.hpp): the per-layer context, the states and their
// device memory around mixer_forward / mixer_backward (mixer_cuda.hpp). The layer checked every
// tensor before these run (mixer_layer.cpp).
#include <cuda_runtime_api.h>

#include <memory>

#include "cuda/call.hpp"
#include "cuda/mixer_cuda.hpp"
#include "device_impl.hpp"
#include "plexus_cuda_kernels/current_device.hpp"
#include "plexus_cuda_kernels/error.hpp"
#include "plexus_cuda_layer/arena.hpp"
#include "plexus_cuda_layer/context.hpp"

namespace plexus::mamba {

bool cuda_built() noexcept {
  return true;
}

namespace cuda {
namespace {

namespace cl = plexus::cuda_layer;

// A microbatch's state on the GPU: the record every state has (mixer.hpp) and, after a training
// forward, the device memory it keeps (an inference forward keeps nothing).
struct CudaState : MixerStateBase {
  explicit CudaState(DLDevice device) : memory(device) {}
  cl::Arena memory;
  Kept kept;
};

class MixerCuda final : public MixerDevice {
 public:
  MixerCuda(const MixerConfig& config, DLDevice device)
      : config_(config), device_(device), context_(kComponent, device) {}

  std::unique_ptr<MixerStateBase> create_state() override { return std::make_unique<CudaState>(device_); }

  void forward(MixerStateBase& state, const MixerWeights<float>& w, int64_t batch, int64_t seq,
               const float* h, float* out, bool training, plx_stream stream) override {
    cl::Context::Scope scope(context_, stream);
    auto& st = static_cast<CudaState&>(state);
    st.memory.release();  // what an earlier forward of this state kept
    st.kept = Kept{};
    cl::Arena temp(device_);
    Call call{scope.handle(), scope.stream(), temp};
    if (batch * seq > 0)
      mixer_forward(config_, w, batch, seq, h, out, training ? &st.kept : nullptr, &st.memory, call);
    st.saved = training;
    st.precision = Precision::f32;
    st.batch = batch;
    st.seq = seq;
  }

  void backward(MixerStateBase& state, const MixerWeights<float>& w, const MixerGrads<float>& grads,
                const float* dout, float* dh, plx_stream stream) override {
    cl::Context::Scope scope(context_, stream);
    auto& st = static_cast<CudaState&>(state);
    st.memory.used_on(scope.stream());
    if (st.batch * st.seq == 0) return;  // nothing to add; no input gradient has an element
    cl::Arena temp(device_);
    Call call{scope.handle(), scope.stream(), temp};
    mixer_backward(config_, w, grads, st.batch, st.seq, st.kept, dout, dh, call);
  }

  void upload(const void* host, std::size_t bytes, void* device) override {
    const plexus::cuda_kernels::CurrentDevice guard(device_.device_id);
    PLEXUS_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "mamba.mixer init_param");
  }

 private:
  MixerConfig config_;
  DLDevice device_;
  cl::Context context_;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<MixerDevice> make_cuda_mixer(const MixerConfig& config, DLDevice device) {
  return std::make_unique<cuda::MixerCuda>(config, device);
}

}  // namespace plexus::mamba

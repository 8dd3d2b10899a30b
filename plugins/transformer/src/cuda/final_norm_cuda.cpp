// transformer.norm on a CUDA device: y = norm(x) with float32 or bfloat16 activations and float32
// parameters (see ../norm.cpp for the CPU path).
#include "cuda/cuda_layer.hpp"
#include "cuda/norm_ops.hpp"
#include "cuda_layers.hpp"

namespace plexus::transformer {
namespace cuda {
namespace {

struct NormState : CudaState {
  using CudaState::CudaState;
  Kept xhat;              // T [N, C]
  float* rstd = nullptr;  // [N]
};

class FinalNormCuda final : public CudaLayer<FinalNormCuda, NormLayerSpec, NormState> {
 public:
  using CudaLayer::CudaLayer;

 private:
  friend CudaLayer;

  template <class T>
  void run_forward(NormState& st, const plx_forward_args& args, Context::Scope& scope) {
    const DLTensor& x = args.inputs[0];
    int64_t batch = 0, seq = 0;
    expect_hidden(x, device(), dtype_v<T>(), spec_.hidden, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], device(), dtype_v<T>(), {batch, seq, spec_.hidden}, "output 0");
    expect_params(args.params, nullptr);
    start_forward(st, args, batch, seq, act_v<T>);

    const auto rows = batch * seq;
    const auto n = static_cast<std::size_t>(rows);
    cudaStream_t stream = scope.stream();
    T* xhat =
        st.record.saved ? st.memory.take<T>(n * static_cast<std::size_t>(spec_.hidden), stream) : nullptr;
    st.xhat = xhat;
    st.rstd = st.record.saved ? st.memory.take<float>(n, stream) : nullptr;
    norm_forward<T>(spec_.norm, rows, data<T>(x), data<float>(args.params[0]),
                    spec_.norm.rms ? nullptr : data<float>(args.params[1]), data<T>(args.outputs[0]), xhat,
                    st.rstd, stream);
  }

  template <class T>
  void run_backward(NormState& st, const plx_backward_args& args, Context::Scope& scope) {
    const HiddenGrads<T> g = expect_hidden_backward<T>(spec_, spec_.hidden, st.record, args);
    float* dw = grad_or_null(args.param_grads, 0);
    float* db = spec_.norm.rms ? nullptr : grad_or_null(args.param_grads, 1);
    norm_backward<T>(spec_.norm, scope.handle(), g.batch * g.seq, g.dy, st.xhat.get<T>(), st.rstd,
                     data<float>(args.params[0]), g.dx, dw, db);
  }
};

}  // namespace
}  // namespace cuda

std::unique_ptr<DeviceImpl> make_cuda_norm(const NormLayerSpec& spec) {
  return std::make_unique<cuda::FinalNormCuda>(spec);
}

}  // namespace plexus::transformer

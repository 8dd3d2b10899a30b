// transformer.mlp on a CUDA device: f = act(norm(x) W1^T) W2^T with gelu (exact) or swiglu, the
// CPU path's math (see ../mlp.cpp) over plexus_cuda_kernels, on the call's stream, with float32 or
// bfloat16 activations and float32 parameters. With bf16 activations W1 and W2 are used as bf16
// copies (kept from a training forward for its backward), products accumulate in fp32, and the
// weight gradients are accumulated in fp32.
#include "cuda/prenorm_cuda_layer.hpp"
#include "cuda_layers.hpp"
#include "plexus_cuda_kernels/activation.hpp"

namespace plexus::transformer {
namespace cuda {
namespace {

// The state is PreNormCudaState: in is a, fc1's output (pre-activation), [N, F] or [N, 2F]; mid
// the activation output act, [N, F].
using MlpState = PreNormCudaState;

class MlpCuda final : public PreNormCudaLayer<MlpCuda, MlpSpec, MlpState> {
 public:
  using PreNormCudaLayer::PreNormCudaLayer;

 private:
  friend PreNormCudaLayer;

  int64_t ffn() const { return spec_.projections.mid_cols; }

  // act = gelu(a) or swiglu(a), kept in a training forward.
  template <class T>
  T* core_forward(MlpState&, Context::Scope& scope, Arena& keep, const Tokens& t, bool, T* a) {
    cudaStream_t stream = scope.stream();
    T* act = keep.take<T>(sz(t.n * ffn()), stream);
    if (spec_.swiglu)
      ck::swiglu_forward<T>(t.n, ffn(), a, act, stream);
    else
      ck::gelu_forward<T>(t.n * ffn(), a, act, stream);
    return act;
  }

  // Through the activation (gelu in place; swiglu's gradient has both halves of a): da from dact.
  template <class T>
  const T* core_backward(const MlpState& st, Context::Scope& scope, Arena& temp, const Tokens& t, T* dact) {
    cudaStream_t stream = scope.stream();
    const T* a = st.in.get<T>();
    T* da = spec_.swiglu ? temp.take<T>(sz(t.n * spec_.projections.in_rows), stream) : dact;
    if (spec_.swiglu)
      ck::swiglu_backward<T>(t.n, ffn(), a, dact, da, stream);
    else
      ck::gelu_backward<T>(t.n * ffn(), a, dact, da, stream);
    return da;
  }
};

}  // namespace
}  // namespace cuda

std::unique_ptr<DeviceImpl> make_cuda_mlp(const MlpSpec& spec) {
  return std::make_unique<cuda::MlpCuda>(spec);
}

}  // namespace plexus::transformer

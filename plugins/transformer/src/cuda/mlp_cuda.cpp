// transformer.mlp on a CUDA device: f = act(norm(x) W1^T) W2^T with gelu (exact) or swiglu, the
// CPU path's math (see ../mlp.cpp) over plexus_cuda_kernels, on the call's stream, with float32 or
// bfloat16 activations and float32 parameters. With bf16 activations W1 and W2 are used as bf16
// copies (kept from a training forward for its backward), products accumulate in fp32, and the
// weight gradients are accumulated in fp32.
#include "cuda/cuda_layer.hpp"
#include "cuda/norm_ops.hpp"
#include "cuda_layers.hpp"
#include "plexus_cuda_kernels/activation.hpp"
#include "plexus_cuda_kernels/gemm.hpp"

namespace plexus::transformer {
namespace cuda {
namespace {

using ck::Trans;

struct MlpState : CudaState {
  using CudaState::CudaState;
  Kept xhat;              // T: the pre-norm
  float* rstd = nullptr;  // [N]
  Kept a;                 // T: fc1 output (pre-activation), [N, F] or [N, 2F]
  Kept act;               // T: activation output, [N, F]
  Kept w1, w2;            // bf16 only: the forward's bf16 copies of the weights, for backward
};

class MlpCuda final : public CudaLayer<MlpCuda, MlpSpec, MlpState> {
 public:
  using CudaLayer::CudaLayer;

 private:
  friend CudaLayer;

  // Products with T activations: gemm<T, T> gives an activation, gemm<T, float> accumulates into
  // an fp32 weight gradient (both gemm<float, float> for T = float).
  template <class T>
  void run_forward(MlpState& st, const plx_forward_args& args, Context::Scope& scope) {
    const DLTensor& x = args.inputs[0];
    const int64_t c = spec_.hidden, f = spec_.ffn, rows = spec_.fc1_rows;
    int64_t batch = 0, seq = 0;
    expect_hidden(x, device(), dtype_v<T>(), c, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], device(), dtype_v<T>(), {batch, seq, c}, "output 0");
    expect_params(args.params, nullptr);
    start_forward(st, args, batch, seq, act_v<T>);
    const bool train = st.record.saved;
    const int64_t n = batch * seq;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();

    Arena temp(device());
    Arena& keep = train ? st.memory : temp;
    const float* w_norm = data<float>(args.params[0]);
    const float* b_norm = spec_.norm.rms ? nullptr : data<float>(args.params[1]);
    const T* w1 = operand_as<T>(data<float>(args.params[spec_.fc1_index]), rows * c, keep, stream);
    const T* w2 = operand_as<T>(data<float>(args.params[spec_.fc1_index + 1]), c * f, keep, stream);

    T* u = temp.take<T>(sz(n * c), stream);
    T* xhat = train ? keep.take<T>(sz(n * c), stream) : nullptr;
    st.rstd = train ? keep.take<float>(sz(n), stream) : nullptr;
    norm_forward<T>(spec_.norm, n, data<T>(x), w_norm, b_norm, u, xhat, st.rstd, stream);

    T* a = keep.take<T>(sz(n * rows), stream);
    ck::gemm<T, T>(h, Trans::N, Trans::T, n, rows, c, 1.0f, u, c, w1, c, 0.0f, a, rows);
    T* act = keep.take<T>(sz(n * f), stream);
    if (spec_.swiglu)
      ck::swiglu_forward<T>(n, f, a, act, stream);
    else
      ck::gelu_forward<T>(n * f, a, act, stream);
    ck::gemm<T, T>(h, Trans::N, Trans::T, n, c, f, 1.0f, act, f, w2, f, 0.0f, data<T>(args.outputs[0]), c);
    st.xhat = xhat;
    st.a = train ? a : nullptr;
    st.act = train ? act : nullptr;
    // For T = float these are the call's parameters, which backward takes from its own call.
    st.w1 = train && act_v<T> == Act::bf16 ? w1 : nullptr;
    st.w2 = train && act_v<T> == Act::bf16 ? w2 : nullptr;
  }

  template <class T>
  void run_backward(MlpState& st, const plx_backward_args& args, Context::Scope& scope) {
    const HiddenGrads<T> g = expect_hidden_backward<T>(spec_, spec_.hidden, st.record, args);
    const int64_t c = spec_.hidden, f = spec_.ffn, rows = spec_.fc1_rows, n = g.batch * g.seq;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();

    const float* w_norm = data<float>(args.params[0]);
    const float* b_norm = spec_.norm.rms ? nullptr : data<float>(args.params[1]);
    const T* w1 = kept_weight<T>(st.w1, data<float>(args.params[spec_.fc1_index]));
    const T* w2 = kept_weight<T>(st.w2, data<float>(args.params[spec_.fc1_index + 1]));
    float* dw_norm = grad_or_null(args.param_grads, 0);
    float* db_norm = spec_.norm.rms ? nullptr : grad_or_null(args.param_grads, 1);
    float* dw1 = grad_or_null(args.param_grads, spec_.fc1_index);
    float* dw2 = grad_or_null(args.param_grads, spec_.fc1_index + 1);
    const T* xhat = st.xhat.get<T>();
    const T* a = st.a.get<T>();

    // f = act W2^T:  dact = df W2,  dW2 += df^T act.
    Arena temp(device());
    T* dact = temp.take<T>(sz(n * f), stream);
    ck::gemm<T, T>(h, Trans::N, Trans::N, n, f, c, 1.0f, g.dy, c, w2, f, 0.0f, dact, f);
    if (dw2 != nullptr)
      ck::gemm<T, float>(h, Trans::T, Trans::N, c, f, n, 1.0f, g.dy, c, st.act.get<T>(), f, 1.0f, dw2, f);

    // Through the activation (gelu in place; swiglu's gradient has both halves of a).
    T* da = spec_.swiglu ? temp.take<T>(sz(n * rows), stream) : dact;
    if (spec_.swiglu)
      ck::swiglu_backward<T>(n, f, a, dact, da, stream);
    else
      ck::gelu_backward<T>(n * f, a, dact, da, stream);

    // a = u W1^T:  dW1 += da^T u,  du = da W1; then the norm's backward.
    T* work = temp.take<T>(sz(n * c), stream);  // u, then du
    if (dw1 != nullptr) {
      norm_apply<T>(spec_.norm, n, xhat, w_norm, b_norm, work, stream);
      ck::gemm<T, float>(h, Trans::T, Trans::N, rows, c, n, 1.0f, da, rows, work, c, 1.0f, dw1, c);
    }
    if (g.dx != nullptr || dw_norm != nullptr || db_norm != nullptr) {
      ck::gemm<T, T>(h, Trans::N, Trans::N, n, c, rows, 1.0f, da, rows, w1, c, 0.0f, work, c);
      norm_backward<T>(spec_.norm, h, n, work, xhat, st.rstd, w_norm, g.dx, dw_norm, db_norm);
    }
  }
};

}  // namespace
}  // namespace cuda

std::unique_ptr<DeviceImpl> make_cuda_mlp(const MlpSpec& spec) {
  return std::make_unique<cuda::MlpCuda>(spec);
}

}  // namespace plexus::transformer

// transformer.lm_head on a CUDA device: logits = h W^T and the mean token cross-entropy over
// targets != -1 (see ../lm_head.cpp and ../../README.md), with hidden states h in float32 or
// bfloat16 and W float32.
//
// The logits and the loss are float32 whatever h is: with bf16 h the logits come from a bf16
// product with fp32 output (h and a bf16 copy of W, accumulated in fp32), so the softmax and the
// cross-entropy run in fp32 on fp32 logits (a vocabulary-wide softmax is where bf16 rounding would
// hurt most). In backward the fp32 logit gradient is rounded to bf16 once for the two products:
// dh (bf16) and dW (accumulated in fp32).
//
// The loss stays on the device (the kernel writes the mean into output 0), and so does the count
// of counted tokens: backward scales by dL/dloss / count with the fused cross-entropy backward,
// which reads both from device memory and recomputes the softmax from the kept logits. So no
// scalar is read back, except for the check of the targets' range (see forward).
#include "cuda/cuda_layer.hpp"
#include "cuda_layers.hpp"
#include "plexus_cuda_kernels/cross_entropy.hpp"
#include "plexus_cuda_kernels/elementwise.hpp"
#include "plexus_cuda_kernels/embedding.hpp"
#include "plexus_cuda_kernels/gemm.hpp"

namespace plexus::transformer {
namespace cuda {
namespace {

using ck::Trans;

constexpr int32_t kIgnore = -1;

struct HeadState : CudaState {
  using CudaState::CudaState;
  Kept h;                      // T: the input hidden states [N, C]
  float* logits = nullptr;     // [N, V], fp32 for either T
  int32_t* targets = nullptr;  // [N]
  int64_t* count = nullptr;    // tokens whose target is not -1 (device scalar)
  Kept w;                      // bf16 only: the forward's bf16 copy of W, for backward
};

class LmHeadCuda final : public CudaLayer<LmHeadCuda, HeadSpec, HeadState> {
 public:
  using CudaLayer::CudaLayer;

 private:
  friend CudaLayer;

  // Seeded by the (fp32) loss alone: the activation type is the forward's, which grad input 0 must
  // have when it is wanted (ForwardRecord::expect refuses another).
  static Act backward_act(const HeadState& st, const plx_backward_args& args) {
    const DLTensor& dh = args.grad_inputs[0];
    return dh.data != nullptr ? act_of(dh.dtype, "grad input 0") : st.record.act;
  }

  template <class T>
  void run_forward(HeadState& st, const plx_forward_args& args, Context::Scope& scope) {
    const DLTensor& x = args.inputs[0];
    const int64_t c = spec_.hidden, v = spec_.rows;  // the padded vocabulary's rows
    int64_t batch = 0, seq = 0;
    expect_hidden(x, device(), dtype_v<T>(), c, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.inputs[1], device(), plx_dtype_i32(), {batch, seq}, "input 1 (targets)");
    expect_tensor(args.outputs[0], device(), plx_dtype_f32(), {1}, "output 0 (loss)");
    expect_tensor(args.outputs[1], device(), plx_dtype_f32(), {batch, seq, v}, "output 1 (logits)");
    expect_params(args.params, nullptr);
    start_forward(st, args, batch, seq, act_v<T>);
    const bool train = st.record.saved;
    const int64_t n = batch * seq;
    const auto sz = [](int64_t value) { return static_cast<std::size_t>(value); };
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();
    const T* hidden = data<T>(x);
    const int32_t* targets = data<int32_t>(args.inputs[1]);
    float* logits = data<float>(args.outputs[1]);

    // As in the embedding: the range check is queued first and read back at the end, so its one
    // synchronization also waits for the products.
    Arena temp(device());
    Arena& keep = train ? st.memory : temp;
    auto* bad = temp.take<int64_t>(1, stream);
    ck::first_invalid_id(n, targets, spec_.vocab, true, kIgnore, bad, stream);
    const T* w = operand_as<T>(data<float>(args.params[0]), v * c, keep, stream);
    ck::gemm<T, float>(h, Trans::N, Trans::T, n, v, c, 1.0f, hidden, c, w, c, 0.0f, logits, v);
    ck::CrossEntropyOutputs ce;
    ce.count = keep.take<int64_t>(1, stream);
    ce.loss_mean = data<float>(args.outputs[0]);
    ck::cross_entropy_forward<float>(h, n, v, logits, targets, kIgnore, ce, nullptr);
    if (train) {
      // Copies: the engine may reuse its tensors once forward returns.
      T* saved_h = keep.take<T>(sz(n * c), stream);
      st.h = saved_h;
      st.logits = keep.take<float>(sz(n * v), stream);
      st.targets = keep.take<int32_t>(sz(n), stream);
      st.count = ce.count;
      ck::copy<T>(n * c, hidden, saved_h, stream);
      ck::copy<float>(n * v, logits, st.logits, stream);
      ck::copy<int32_t>(n, targets, st.targets, stream);
    }
    // For T = float this is the call's parameter, which backward takes from its own call.
    st.w = train && act_v<T> == Act::bf16 ? w : nullptr;
    if (const int64_t first = read_back(bad, stream); first >= 0) {
      st.record.saved = false;
      throw_invalid_target(read_back(targets + first, stream), first, seq, spec_.vocab);
    }
  }

  template <class T>
  void run_backward(HeadState& st, const plx_backward_args& args, Context::Scope& scope) {
    // Seeded by the loss alone: the sizes are the forward's.
    st.record.expect(st.record.batch, st.record.seq, act_v<T>);
    const int64_t c = spec_.hidden, v = spec_.rows, batch = st.record.batch, seq = st.record.seq;
    const int64_t n = batch * seq;
    // grad output 0: dL/dloss as a [1] float32 device tensor (the engine's seed), for either
    // activation type: the loss is float32.
    const DLTensor& seed = args.grad_outputs[0];
    if (!plx_dtype_equal(seed.dtype, plx_dtype_f32()))
      throw Error(
          PLX_ERR_INVALID_ARGUMENT,
          "grad output 0 (dL/dloss): expected dtype float32 (on a CUDA device the loss is float32), got " +
              plexus::sdk::dtype_name(seed.dtype));
    expect_tensor(seed, device(), plx_dtype_f32(), {1}, "grad output 0 (dL/dloss)");
    // grad output 1 (logits) is not used: the loss is the only thing differentiated.
    const DLTensor& dh_t = args.grad_inputs[0];
    if (dh_t.data != nullptr) expect_tensor(dh_t, device(), dtype_v<T>(), {batch, seq, c}, "grad input 0");
    expect_params(args.params, args.param_grads);
    T* dh = dh_t.data != nullptr ? data<T>(dh_t) : nullptr;
    float* dw = grad_or_null(args.param_grads, 0);
    if (dh == nullptr && dw == nullptr) return;
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();

    // dlogits = (s / count) (softmax - onehot), zero rows for ignored targets, all zero when no
    // target counts (in fp32, from the fp32 logits); then dh = dlogits W (written),
    // dW += dlogits^T h, with dlogits rounded to bf16 once for both when T is bf16. The kept
    // logits stay intact (backward may run again on this state).
    Arena temp(device());
    float* dlogits = temp.take<float>(static_cast<std::size_t>(n * v), stream);
    ck::cross_entropy_backward<float>(n, v, st.logits, st.targets, kIgnore, data<float>(seed), st.count,
                                      dlogits, stream);
    const T* dl = operand_as<T>(dlogits, n * v, temp, stream);
    if (dh != nullptr)
      ck::gemm<T, T>(h, Trans::N, Trans::N, n, c, v, 1.0f, dl, v,
                     kept_weight<T>(st.w, data<float>(args.params[0])), c, 0.0f, dh, c);
    if (dw != nullptr)
      ck::gemm<T, float>(h, Trans::T, Trans::N, v, c, n, 1.0f, dl, v, st.h.get<T>(), c, 1.0f, dw, c);
  }
};

}  // namespace
}  // namespace cuda

std::unique_ptr<DeviceImpl> make_cuda_lm_head(const HeadSpec& spec) {
  return std::make_unique<cuda::LmHeadCuda>(spec);
}

}  // namespace plexus::transformer

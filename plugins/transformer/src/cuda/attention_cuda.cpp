// transformer.attention on a CUDA device, float32 or bfloat16 activations with float32
// parameters: the CPU path's math (see ../attention.cpp and ../../README.md) over
// plexus_cuda_kernels: cuBLAS products, the norms, rotary embeddings and the causal grouped-query
// attention kernel, all on the call's stream. With bf16 activations the two weight matrices are
// used as bf16 copies (kept from a training forward for its backward), products accumulate in
// fp32, and the weight gradients are accumulated in fp32.
#include <cuda_runtime_api.h>

#include <optional>

#include "cuda/cuda_layer.hpp"
#include "cuda/norm_ops.hpp"
#include "cuda_layers.hpp"
#include "plexus_cuda_kernels/attention.hpp"
#include "plexus_cuda_kernels/device_buffer.hpp"
#include "plexus_cuda_kernels/error.hpp"
#include "plexus_cuda_kernels/gemm.hpp"
#include "plexus_cuda_kernels/rope.hpp"

namespace plexus::transformer {
namespace cuda {
namespace {

using ck::Trans;

struct AttentionState : CudaState {
  using CudaState::CudaState;
  Kept xhat;              // T: the pre-norm's normalized input [N, C]
  float* rstd = nullptr;  // and 1/std per token [N]
  Kept qkv;               // T: u Wqkv^T with RoPE applied to q and k, [N, (nh + 2 ng) hd]
  Kept probs;             // T: softmax probabilities [B, nh, S, S]
  Kept out;               // T: attention output before the projection, [N, nh hd]
  Kept w_qkv, w_proj;     // bf16 only: the forward's bf16 copies of the weights, for backward
};

class AttentionCuda final : public CudaLayer<AttentionCuda, AttentionSpec, AttentionState> {
 public:
  explicit AttentionCuda(const AttentionSpec& spec) : CudaLayer(spec) {
    // The rotary tables live as long as the layer, so plain device arrays; computed once in
    // double on the device (as the CPU's), and waited for: later calls may run on a stream that
    // does not synchronize with the default one. fp32 for either activation type (the kernel
    // rotates in fp32).
    const cuda_kernels::CurrentDevice guard(spec.device.device_id);
    const auto table = static_cast<std::size_t>(spec.max_seq * spec.head_dim / 2);
    cos_.emplace(table);
    sin_.emplace(table);
    ck::rope_tables(spec.max_seq, spec.head_dim, spec.rope_base, cos_->data(), sin_->data(), nullptr);
    PLEXUS_CUDA_CHECK(cudaStreamSynchronize(nullptr), "transformer.attention rotary tables");
  }

  ~AttentionCuda() override {
    try {
      const cuda_kernels::CurrentDevice guard(spec_.device.device_id);
      cos_.reset();
      sin_.reset();
    } catch (...) {  // the device is gone: free without it
      cos_.reset();
      sin_.reset();
    }
  }
  AttentionCuda(const AttentionCuda&) = delete;
  AttentionCuda& operator=(const AttentionCuda&) = delete;

 private:
  friend CudaLayer;

  ck::AttentionLayout layout(int64_t batch, int64_t seq) const {
    return ck::AttentionLayout::megatron(batch, seq, spec_.heads, spec_.groups, spec_.head_dim);
  }
  template <class T>
  void rope(T* x, int64_t rows, int64_t seq, bool inverse, cudaStream_t stream) const {
    ck::rope_apply<T>(x, rows, seq, spec_.qkv_rows, spec_.rope_columns.data(),
                      static_cast<int64_t>(spec_.rope_columns.size()), spec_.head_dim, cos_->data(),
                      sin_->data(), inverse, stream);
  }

  // Products with T activations: gemm<T, T> gives an activation, gemm<T, float> accumulates into
  // an fp32 weight gradient (both gemm<float, float> for T = float).
  template <class T>
  void run_forward(AttentionState& st, const plx_forward_args& args, Context::Scope& scope) {
    const DLTensor& x = args.inputs[0];
    const int64_t c = spec_.hidden;
    int64_t batch = 0, seq = 0;
    expect_hidden(x, device(), dtype_v<T>(), c, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], device(), dtype_v<T>(), {batch, seq, c}, "output 0");
    expect_params(args.params, nullptr);
    if (seq > spec_.max_seq)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "sequence length " + std::to_string(seq) +
                                                " exceeds model seq_length " + std::to_string(spec_.max_seq));
    start_forward(st, args, batch, seq, act_v<T>);
    const bool train = st.record.saved;
    const int64_t n = batch * seq, dq = spec_.heads * spec_.head_dim, rows = spec_.qkv_rows;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();

    // Kept for backward in the state, or in this call's temporaries.
    Arena temp(device());
    Arena& keep = train ? st.memory : temp;
    const float* w_norm = data<float>(args.params[0]);
    const float* b_norm = spec_.norm.rms ? nullptr : data<float>(args.params[1]);
    const T* w_qkv = operand_as<T>(data<float>(args.params[spec_.qkv_index]), rows * c, keep, stream);
    const T* w_proj = operand_as<T>(data<float>(args.params[spec_.qkv_index + 1]), c * dq, keep, stream);

    T* u = temp.take<T>(sz(n * c), stream);
    T* xhat = train ? keep.take<T>(sz(n * c), stream) : nullptr;
    st.rstd = train ? keep.take<float>(sz(n), stream) : nullptr;
    norm_forward<T>(spec_.norm, n, data<T>(x), w_norm, b_norm, u, xhat, st.rstd, stream);

    T* qkv = keep.take<T>(sz(n * rows), stream);
    ck::gemm<T, T>(h, Trans::N, Trans::T, n, rows, c, 1.0f, u, c, w_qkv, c, 0.0f, qkv, rows);
    rope<T>(qkv, n, seq, false, stream);

    T* o = keep.take<T>(sz(n * dq), stream);
    T* probs = train ? keep.take<T>(sz(batch * spec_.heads * seq * seq), stream) : nullptr;
    ck::attention_forward<T>(h, layout(batch, seq), qkv, o, probs);

    ck::gemm<T, T>(h, Trans::N, Trans::T, n, c, dq, 1.0f, o, dq, w_proj, dq, 0.0f, data<T>(args.outputs[0]),
                   c);
    st.xhat = xhat;
    st.qkv = train ? qkv : nullptr;
    st.out = train ? o : nullptr;
    st.probs = probs;
    // For T = float these are the call's parameters, which backward takes from its own call.
    st.w_qkv = train && act_v<T> == Act::bf16 ? w_qkv : nullptr;
    st.w_proj = train && act_v<T> == Act::bf16 ? w_proj : nullptr;
  }

  template <class T>
  void run_backward(AttentionState& st, const plx_backward_args& args, Context::Scope& scope) {
    const HiddenGrads<T> g = expect_hidden_backward<T>(spec_, spec_.hidden, st.record, args);
    const int64_t c = spec_.hidden, n = g.batch * g.seq, dq = spec_.heads * spec_.head_dim;
    const int64_t rows = spec_.qkv_rows;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();

    const float* w_norm = data<float>(args.params[0]);
    const float* b_norm = spec_.norm.rms ? nullptr : data<float>(args.params[1]);
    const T* w_qkv = kept_weight<T>(st.w_qkv, data<float>(args.params[spec_.qkv_index]));
    const T* w_proj = kept_weight<T>(st.w_proj, data<float>(args.params[spec_.qkv_index + 1]));
    float* dw_norm = grad_or_null(args.param_grads, 0);
    float* db_norm = spec_.norm.rms ? nullptr : grad_or_null(args.param_grads, 1);
    float* dw_qkv = grad_or_null(args.param_grads, spec_.qkv_index);
    float* dw_proj = grad_or_null(args.param_grads, spec_.qkv_index + 1);
    const T* xhat = st.xhat.get<T>();
    const T* qkv = st.qkv.get<T>();
    const T* out = st.out.get<T>();

    // f = o Wproj^T:  do = df Wproj,  dWproj += df^T o.
    Arena temp(device());
    T* d_o = temp.take<T>(sz(n * dq), stream);
    ck::gemm<T, T>(h, Trans::N, Trans::N, n, dq, c, 1.0f, g.dy, c, w_proj, dq, 0.0f, d_o, dq);
    if (dw_proj != nullptr)
      ck::gemm<T, float>(h, Trans::T, Trans::N, c, dq, n, 1.0f, g.dy, c, out, dq, 1.0f, dw_proj, dq);

    // The attention core, then RoPE's inverse on the q and k gradients.
    T* dqkv = temp.take<T>(sz(n * rows), stream);
    ck::attention_backward<T>(h, layout(g.batch, g.seq), qkv, st.probs.get<T>(), out, d_o, dqkv);
    rope<T>(dqkv, n, g.seq, true, stream);

    // qkv = u Wqkv^T:  dWqkv += dqkv^T u,  du = dqkv Wqkv; then the norm's backward.
    T* work = temp.take<T>(sz(n * c), stream);  // u, then du
    if (dw_qkv != nullptr) {
      norm_apply<T>(spec_.norm, n, xhat, w_norm, b_norm, work, stream);
      ck::gemm<T, float>(h, Trans::T, Trans::N, rows, c, n, 1.0f, dqkv, rows, work, c, 1.0f, dw_qkv, c);
    }
    if (g.dx != nullptr || dw_norm != nullptr || db_norm != nullptr) {
      ck::gemm<T, T>(h, Trans::N, Trans::N, n, c, rows, 1.0f, dqkv, rows, w_qkv, c, 0.0f, work, c);
      norm_backward<T>(spec_.norm, h, n, work, xhat, st.rstd, w_norm, g.dx, dw_norm, db_norm);
    }
  }

  std::optional<ck::DeviceArray<float>> cos_, sin_;  // [seq_length, head_dim / 2]
};

}  // namespace
}  // namespace cuda

std::unique_ptr<DeviceImpl> make_cuda_attention(const AttentionSpec& spec) {
  return std::make_unique<cuda::AttentionCuda>(spec);
}

}  // namespace plexus::transformer

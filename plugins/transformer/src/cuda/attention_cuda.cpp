// transformer.attention on a CUDA device, float32: the CPU path's math (see ../attention.cpp and
// ../../README.md) over plexus_cuda_kernels: cuBLAS products, the norms, rotary embeddings and
// the causal grouped-query attention kernel, all on the call's stream.
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
  float* xhat = nullptr;   // the pre-norm's normalized input [N, C]
  float* rstd = nullptr;   // and 1/std per token [N]
  float* qkv = nullptr;    // u Wqkv^T with RoPE applied to q and k, [N, (nh + 2 ng) hd]
  float* probs = nullptr;  // softmax probabilities [B, nh, S, S]
  float* out = nullptr;    // attention output before the projection, [N, nh hd]
};

class AttentionCuda final : public CudaLayer<AttentionSpec, AttentionState> {
 public:
  explicit AttentionCuda(const AttentionSpec& spec) : CudaLayer(spec) {
    // The rotary tables live as long as the layer, so plain device arrays; computed once in
    // double on the device (as the CPU's), and waited for: later calls may run on a stream that
    // does not synchronize with the default one.
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
  ck::AttentionLayout layout(int64_t batch, int64_t seq) const {
    return ck::AttentionLayout::megatron(batch, seq, spec_.heads, spec_.groups, spec_.head_dim);
  }
  void rope(float* x, int64_t rows, int64_t seq, bool inverse, cudaStream_t stream) const {
    ck::rope_apply<float>(x, rows, seq, spec_.qkv_rows, spec_.rope_columns.data(),
                          static_cast<int64_t>(spec_.rope_columns.size()), spec_.head_dim, cos_->data(),
                          sin_->data(), inverse, stream);
  }

  void run_forward(AttentionState& st, const plx_forward_args& args, Context::Scope& scope) override {
    const DLTensor& x = args.inputs[0];
    expect_f32(x.dtype, "input 0 (hidden states)");
    const int64_t c = spec_.hidden;
    int64_t batch = 0, seq = 0;
    expect_hidden(x, device(), plx_dtype_f32(), c, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], device(), plx_dtype_f32(), {batch, seq, c}, "output 0");
    expect_params(args.params, nullptr);
    if (seq > spec_.max_seq)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "sequence length " + std::to_string(seq) +
                                                " exceeds model seq_length " + std::to_string(spec_.max_seq));
    start_forward(st, args, batch, seq);
    const bool train = st.record.saved;
    const int64_t n = batch * seq, dq = spec_.heads * spec_.head_dim, rows = spec_.qkv_rows;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();

    const float* w_norm = data<float>(args.params[0]);
    const float* b_norm = spec_.norm.rms ? nullptr : data<float>(args.params[1]);
    const float* w_qkv = data<float>(args.params[spec_.qkv_index]);
    const float* w_proj = data<float>(args.params[spec_.qkv_index + 1]);

    // Kept for backward in the state, or in this call's temporaries.
    Arena temp(device());
    Arena& keep = train ? st.memory : temp;
    float* u = temp.take<float>(sz(n * c), stream);
    st.xhat = train ? keep.take<float>(sz(n * c), stream) : nullptr;
    st.rstd = train ? keep.take<float>(sz(n), stream) : nullptr;
    norm_forward(spec_.norm, n, data<float>(x), w_norm, b_norm, u, st.xhat, st.rstd, stream);

    float* qkv = keep.take<float>(sz(n * rows), stream);
    ck::gemm<float, float>(h, Trans::N, Trans::T, n, rows, c, 1.0f, u, c, w_qkv, c, 0.0f, qkv, rows);
    rope(qkv, n, seq, false, stream);

    float* o = keep.take<float>(sz(n * dq), stream);
    float* probs = train ? keep.take<float>(sz(batch * spec_.heads * seq * seq), stream) : nullptr;
    ck::attention_forward<float>(h, layout(batch, seq), qkv, o, probs);

    ck::gemm<float, float>(h, Trans::N, Trans::T, n, c, dq, 1.0f, o, dq, w_proj, dq, 0.0f,
                           data<float>(args.outputs[0]), c);
    st.qkv = train ? qkv : nullptr;
    st.out = train ? o : nullptr;
    st.probs = probs;
  }

  void run_backward(AttentionState& st, const plx_backward_args& args, Context::Scope& scope) override {
    const HiddenGrads g = expect_hidden_backward(spec_, spec_.hidden, st.record, args);
    const int64_t c = spec_.hidden, n = g.batch * g.seq, dq = spec_.heads * spec_.head_dim;
    const int64_t rows = spec_.qkv_rows;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();

    const float* w_norm = data<float>(args.params[0]);
    const float* b_norm = spec_.norm.rms ? nullptr : data<float>(args.params[1]);
    const float* w_qkv = data<float>(args.params[spec_.qkv_index]);
    const float* w_proj = data<float>(args.params[spec_.qkv_index + 1]);
    float* dw_norm = grad_or_null(args.param_grads, 0);
    float* db_norm = spec_.norm.rms ? nullptr : grad_or_null(args.param_grads, 1);
    float* dw_qkv = grad_or_null(args.param_grads, spec_.qkv_index);
    float* dw_proj = grad_or_null(args.param_grads, spec_.qkv_index + 1);

    // f = o Wproj^T:  do = df Wproj,  dWproj += df^T o.
    Arena temp(device());
    float* d_o = temp.take<float>(sz(n * dq), stream);
    ck::gemm<float, float>(h, Trans::N, Trans::N, n, dq, c, 1.0f, g.dy, c, w_proj, dq, 0.0f, d_o, dq);
    if (dw_proj != nullptr)
      ck::gemm<float, float>(h, Trans::T, Trans::N, c, dq, n, 1.0f, g.dy, c, st.out, dq, 1.0f, dw_proj, dq);

    // The attention core, then RoPE's inverse on the q and k gradients.
    float* dqkv = temp.take<float>(sz(n * rows), stream);
    ck::attention_backward<float>(h, layout(g.batch, g.seq), st.qkv, st.probs, st.out, d_o, dqkv);
    rope(dqkv, n, g.seq, true, stream);

    // qkv = u Wqkv^T:  dWqkv += dqkv^T u,  du = dqkv Wqkv; then the norm's backward.
    float* work = temp.take<float>(sz(n * c), stream);  // u, then du
    if (dw_qkv != nullptr) {
      norm_apply(spec_.norm, n, st.xhat, w_norm, b_norm, work, stream);
      ck::gemm<float, float>(h, Trans::T, Trans::N, rows, c, n, 1.0f, dqkv, rows, work, c, 1.0f, dw_qkv, c);
    }
    if (g.dx != nullptr || dw_norm != nullptr || db_norm != nullptr) {
      ck::gemm<float, float>(h, Trans::N, Trans::N, n, c, rows, 1.0f, dqkv, rows, w_qkv, c, 0.0f, work, c);
      norm_backward(spec_.norm, h, n, work, st.xhat, st.rstd, w_norm, g.dx, dw_norm, db_norm);
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

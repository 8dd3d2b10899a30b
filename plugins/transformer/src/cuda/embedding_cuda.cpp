// transformer.embedding on a CUDA device: h[b, s] = W[tokens[b, s]] (see ../embedding.cpp), with
// h in float32 or bfloat16 (the output's dtype: the engine allocates it in its activation dtype,
// though output_desc reports float32) and W float32. The lookup and its gradient are bitwise equal
// to the CPU's in float32 (copies, and additions in token order); in bfloat16 the lookup is the
// CPU's value rounded once, and the gradient the CPU's over the same (bf16) upstream gradient.
#include "cuda/cuda_layer.hpp"
#include "cuda_layers.hpp"
#include "plexus_cuda_kernels/elementwise.hpp"
#include "plexus_cuda_kernels/embedding.hpp"

namespace plexus::transformer {
namespace cuda {
namespace {

struct EmbeddingState : CudaState {
  using CudaState::CudaState;
  int32_t* tokens = nullptr;  // the ids of a training forward, [N]
};

class EmbeddingCuda final : public CudaLayer<EmbeddingCuda, EmbeddingSpec, EmbeddingState> {
 public:
  using CudaLayer::CudaLayer;

 private:
  friend CudaLayer;

  // The output's dtype decides (the input holds integer ids), as on the CPU.
  static Act forward_act(const plx_forward_args& args) {
    return act_of(args.outputs[0].dtype, "output 0 (hidden states)");
  }

  template <class T>
  void run_forward(EmbeddingState& st, const plx_forward_args& args, Context::Scope& scope) {
    const DLTensor& tokens = args.inputs[0];
    const DLTensor& out = args.outputs[0];
    if (tokens.ndim != 2)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "input 0 (token ids): expected shape [batch, seq], got " + shape_text(tokens));
    const int64_t batch = tokens.shape[0], seq = tokens.shape[1], n = batch * seq;
    expect_tensor(tokens, device(), plx_dtype_i32(), {batch, seq}, "input 0 (token ids)");
    expect_tensor(out, device(), dtype_v<T>(), {batch, seq, spec_.hidden}, "output 0 (hidden states)");
    expect_params(args.params, nullptr);
    start_forward(st, args, batch, seq, act_v<T>);
    cudaStream_t stream = scope.stream();
    const int32_t* ids = data<int32_t>(tokens);

    // Invalid ids are refused like on the CPU, which needs their index on the host: the check is
    // queued before the lookup (which reads nothing out of bounds for them) and read back after
    // it, so the one synchronization of this call waits for the lookup too.
    Arena temp(device());
    auto* bad = temp.take<int64_t>(1, stream);
    ck::first_invalid_id(n, ids, spec_.vocab, false, 0, bad, stream);
    ck::embedding_forward<T>(n, spec_.hidden, spec_.vocab, ids, data<float>(args.params[0]), data<T>(out),
                             stream);
    if (st.record.saved) {
      st.tokens = st.memory.take<int32_t>(static_cast<std::size_t>(n), stream);
      ck::copy<int32_t>(n, ids, st.tokens, stream);
    }
    if (const int64_t first = read_back(bad, stream); first >= 0) {
      st.record.saved = false;
      throw_invalid_token(read_back(ids + first, stream), first, seq, spec_.vocab);
    }
  }

  template <class T>
  void run_backward(EmbeddingState& st, const plx_backward_args& args, Context::Scope& scope) {
    const DLTensor& dy = args.grad_outputs[0];
    int64_t batch = 0, seq = 0;
    expect_hidden(dy, device(), dtype_v<T>(), spec_.hidden, "grad output 0", batch, seq);
    st.record.expect(batch, seq, act_v<T>);
    expect_params(args.params, args.param_grads);
    // grad_inputs[0] (token ids) has no gradient: it is left alone.
    if (float* dw = grad_or_null(args.param_grads, 0))
      ck::embedding_backward<T>(scope.handle(), batch * seq, spec_.hidden, spec_.vocab, st.tokens,
                                data<T>(dy), dw);
  }
};

}  // namespace
}  // namespace cuda

std::unique_ptr<DeviceImpl> make_cuda_embedding(const EmbeddingSpec& spec) {
  return std::make_unique<cuda::EmbeddingCuda>(spec);
}

}  // namespace plexus::transformer

// transformer.embedding: h[b, s, :] = W[tokens[b, s], :] with W = embedding.word_embeddings.weight.
#include <memory>
#include <vector>

#include "common.hpp"
#include "cuda_layers.hpp"
#include "plexus_kernels/embedding.hpp"

namespace plexus::transformer {
namespace {

class EmbeddingState : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> tokens;
};

class Embedding final : public LayerShell<Embedding, EmbeddingState> {
  friend class LayerShell<Embedding, EmbeddingState>;

 public:
  explicit Embedding(const plx_layer_create_args& args) : LayerShell("transformer.embedding", args, 1, 1) {
    const auto host = plexus::sdk::Host::current();
    vocab_ = positive_int(host, args.model_config, "vocab_size");
    hidden_ = positive_int(host, args.model_config, "hidden_size");
    const double std_dev = positive_number(host, args.model_config, "init_method_std");
    params_.push_back(
        make_param("embedding.word_embeddings.weight", {vocab_, hidden_}, PLX_INIT_NORMAL, std_dev, 0));
    if (on_cuda()) {
      EmbeddingSpec spec;
      fill_spec(spec);
      spec.vocab = vocab_;
      spec.hidden = hidden_;
      device_impl_ = make_cuda_embedding(spec);
    }
  }

  // The output's dtype cannot follow an integer input: it is the master dtype, float32. A
  // forward given a float64 output (and float64 weights) runs in float64.
  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    expect_descs("output_desc", num_inputs, num_outputs);
    expect_tokens_desc(inputs[0]);
    plx_tensor_desc out{};
    out.ndim = 3;
    out.dtype = plx_dtype_f32();
    out.dims[0] = inputs[0].dims[0];
    out.dims[1] = inputs[0].dims[1];
    out.dims[2] = hidden_;
    outputs[0] = out;
  }

  // The output's dtype decides: the input holds integer token ids.
  Precision forward_precision(const plx_forward_args& args) const {
    return precision_of(args.outputs[0].dtype, "output 0 (hidden states)");
  }

  // A lookup has no matrix product: 0 FLOPs forward and backward (only matmuls are counted).
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc*, double& forward,
                      double& backward) const override {
    expect_descs("estimate_flops", num_inputs, 1);
    forward = 0;
    backward = 0;
  }

 private:
  static void expect_tokens_desc(const plx_tensor_desc& d) {
    if (!plx_dtype_equal(d.dtype, plx_dtype_i32()))
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "input 0 (token ids): expected dtype int32, got " + plexus::sdk::dtype_name(d.dtype));
    if (d.ndim != 2)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "input 0 (token ids): expected shape [batch, seq], got " + shape_text(d.dims, d.ndim));
  }

  template <class T>
  void run_forward(EmbeddingState& st, const plx_forward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    const DLTensor& tokens = args.inputs[0];
    if (tokens.ndim != 2)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "input 0 (token ids): expected shape [batch, seq], got " + shape_text(tokens));
    const int64_t batch = tokens.shape[0], seq = tokens.shape[1];
    expect_tensor(tokens, device_, plx_dtype_i32(), {batch, seq}, "input 0 (token ids)");
    expect_tensor(args.outputs[0], device_, dt, {batch, seq, hidden_}, "output 0 (hidden states)");
    expect_params(args.params, nullptr, dt);
    const int64_t n = batch * seq;
    const int32_t* ids = data<int32_t>(tokens);
    if (const int64_t bad = kernels::first_invalid_id(n, ids, vocab_); bad >= 0)
      throw_invalid_token(ids[bad], bad, seq, vocab_);
    kernels::embedding_forward<T>(n, hidden_, ids, data<T>(args.params[0]), data<T>(args.outputs[0]));
    st.saved = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.precision = precision_v<T>;
    st.batch = batch;
    st.seq = seq;
    if (st.saved) st.tokens.assign(ids, ids + n);
  }

  template <class T>
  void run_backward(EmbeddingState& st, const plx_backward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.grad_outputs[0], device_, dt, hidden_, "grad output 0", batch, seq);
    expect_saved(st.saved, st.precision, precision_v<T>, st.batch, st.seq, batch, seq);
    expect_params(args.params, args.param_grads, dt);
    // grad_inputs[0] (token ids) has no gradient: it is left alone.
    if (T* dw = grad_or_null<T>(args.param_grads, 0))
      kernels::embedding_backward<T>(batch * seq, hidden_, st.tokens.data(), data<T>(args.grad_outputs[0]),
                                     dw);
  }

  int64_t vocab_ = 0, hidden_ = 0;
};

}  // namespace

const plx_component_desc* embedding_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<Embedding>(
      "transformer.embedding", "token embedding h = W[tokens] (embedding.word_embeddings.weight [V, C])",
      kEmptySchema);
  return &desc;
}

}  // namespace plexus::transformer

// transformer.embedding: h[b, s, :] = W[tokens[b, s], :] with W = embedding.word_embeddings.weight,
// plus P[s, :] with model.position_embedding_type "learned_absolute" (P =
// embedding.position_embeddings.weight [seq_length, hidden], Megatron's LanguageModelEmbedding).
#include <algorithm>
#include <memory>
#include <vector>

#include "common.hpp"
#include "context_parallel.hpp"
#include "cuda_layers.hpp"
#include "plexus_kernels/buffer.hpp"
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
  explicit Embedding(const plx_layer_create_args& args)
      : LayerShell("transformer.embedding", args, 1, 1, PLX_LAYER_CONTEXT_PARALLEL) {
    const auto host = plexus::sdk::Host::current();
    vocab_ = positive_int(host, args.model_config, "vocab_size");
    hidden_ = positive_int(host, args.model_config, "hidden_size");
    const double std_dev = positive_number(host, args.model_config, "init_method_std");
    // Vocabulary-parallel (Megatron's VocabParallelEmbedding): rank r holds rows
    // [r V_p / tp, (r + 1) V_p / tp) of the padded vocabulary; a token's row is looked up on the
    // rank holding it, zeros elsewhere, and the ranks' outputs are summed.
    refuse_split_on_device();
    rows_ = split_over(tp_, padded_vocab_size(host, args.model_config), "padded_vocab_size");
    first_row_ = tp_.rank() * rows_;
    params_.push_back(make_param("embedding.word_embeddings.weight", {rows_, hidden_}, PLX_INIT_NORMAL,
                                 std_dev, PLX_PARAM_VOCABULARY));
    mark_split(params_.back(), 0, {});
    if (position_embedding(host, args.model_config) == PositionEmbedding::learned_absolute) {
      if (on_cuda())
        throw Error(PLX_ERR_UNSUPPORTED,
                    "model.position_embedding_type \"learned_absolute\" is not built for "
                    "CUDA yet (it runs on the CPU; \"rope\" and \"none\" run on both)");
      // Megatron rolls an MTP depth's positions with its tokens; this engine embeds the rolled
      // tokens at unrolled positions, so the two would differ.
      if (host.config_int_if(args.model_config, "mtp_num_layers").value_or(0) > 0)
        throw Error(PLX_ERR_INVALID_ARGUMENT,
                    "model.position_embedding_type \"learned_absolute\" with "
                    "model.mtp_num_layers > 0 is not built (use \"rope\" or \"none\")");
      max_seq_ = positive_int(host, args.model_config, "seq_length");
      // Whole on every tp rank: each computes its full gradient from the whole output gradient.
      params_.push_back(make_param("embedding.position_embeddings.weight", {max_seq_, hidden_},
                                   PLX_INIT_NORMAL, std_dev, 0));
    }
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
    // Under sequence parallelism this rank's block of the tokens (engine: Model::stream_seq).
    out.dims[1] = sp_ ? inputs[0].dims[1] / tp_.size() : inputs[0].dims[1];
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

  // ABI 1.10: the token ids, for the table's gradient.
  double estimate_activation_bytes(uint32_t num_inputs, const plx_tensor_desc* inputs,
                                   const plx_activation_query& /*query*/) const override {
    expect_descs("estimate_activation_bytes", num_inputs, 1);
    expect_tokens_desc(inputs[0]);
    refuse_estimate_on_device();
    return 4.0 * static_cast<double>(inputs[0].dims[0]) * static_cast<double>(inputs[0].dims[1]);
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
    const int64_t out_seq = sp_ ? seq / tp_.size() : seq;
    if (sp_ && seq % tp_.size() != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "input 0 (token ids): sequence parallelism over " +
                                                std::to_string(tp_.size()) + " tp ranks cannot cut " +
                                                std::to_string(seq) + " tokens per sequence");
    expect_tensor(args.outputs[0], device_, dt, {batch, out_seq, hidden_}, "output 0 (hidden states)");
    expect_params(args.params, nullptr, dt);
    const int64_t n = batch * seq;
    const int32_t* ids = data<int32_t>(tokens);
    if (const int64_t bad = kernels::first_invalid_id(n, ids, vocab_); bad >= 0)
      throw_invalid_token(ids[bad], bad, seq, vocab_);
    if (max_seq_ > 0 && seq * cp_.size() > max_seq_)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "input 0 (token ids): " + std::to_string(seq * cp_.size()) +
                      " positions per sequence, but embedding.position_embeddings.weight "
                      "has seq_length " +
                      std::to_string(max_seq_) + " rows");
    T* out = data<T>(args.outputs[0]);
    if (tp_.size() == 1) {
      kernels::embedding_forward<T>(n, hidden_, ids, data<T>(args.params[0]), out);
      add_positions<T>(args.params, batch, seq, out);
    } else {
      // Every token's row from this rank's part of the vocabulary (zeros for the others' rows),
      // summed over tp: all-reduced, or under sequence parallelism reduce-scattered to this
      // rank's block of the tokens.
      kernels::Buffer full;
      T* looked_up = sp_ ? full.get<T>(static_cast<std::size_t>(n * hidden_)) : out;
      const T* w = data<T>(args.params[0]);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = ids[i] - first_row_;
        T* o = looked_up + i * hidden_;
        if (row >= 0 && row < rows_)
          std::copy(w + row * hidden_, w + (row + 1) * hidden_, o);
        else
          std::fill(o, o + hidden_, T(0));
      }
      if (tp_.rank() == 0) add_positions<T>(args.params, batch, seq, looked_up);  // once in the sum
      if (sp_)
        tp_.finish(tp_.start_scatter_sum_rows(looked_up, out, n / tp_.size(), hidden_, dt, device_));
      else
        tp_.all_reduce(args.outputs[0]);
    }
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
    if (sp_) seq *= tp_.size();  // this rank's block of the tokens
    expect_saved(st.saved, st.precision, precision_v<T>, st.batch, st.seq, batch, seq);
    expect_params(args.params, args.param_grads, dt);
    // grad_inputs[0] (token ids) has no gradient: it is left alone.
    T* dw = grad_or_null<T>(args.param_grads, 0);
    T* dpos = max_seq_ > 0 ? grad_or_null<T>(args.param_grads, 1) : nullptr;
    if (dw == nullptr && dpos == nullptr) return;
    const int64_t n = batch * seq;
    // Under sequence parallelism every rank's block of the output gradient, gathered.
    kernels::Buffer gathered;
    const T* dy = data<T>(args.grad_outputs[0]);
    if (sp_) {
      T* all = gathered.get<T>(static_cast<std::size_t>(n * hidden_));
      tp_.gather_rows(dy, all, n / tp_.size(), hidden_, dt, device_);
      dy = all;
    }
    if (dpos != nullptr)  // dP[s] += sum_b dy[b, s], in batch order
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t t = 0; t < seq; ++t) {
          T* row = dpos + position(t, seq) * hidden_;
          const T* d = dy + (b * seq + t) * hidden_;
          for (int64_t i = 0; i < hidden_; ++i) row[i] += d[i];
        }
    if (dw == nullptr) return;
    if (tp_.size() == 1) {
      kernels::embedding_backward<T>(n, hidden_, st.tokens.data(), dy, dw);
      return;
    }
    // This rank's rows only: its tokens' gradients in token order (the sum order of the whole
    // table's kernel, so each row's gradient is the same at every tp).
    std::vector<int32_t> rows;
    std::vector<T> dy_rows;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = st.tokens[static_cast<std::size_t>(i)] - first_row_;
      if (row < 0 || row >= rows_) continue;
      rows.push_back(static_cast<int32_t>(row));
      dy_rows.insert(dy_rows.end(), dy + i * hidden_, dy + (i + 1) * hidden_);
    }
    kernels::embedding_backward<T>(static_cast<int64_t>(rows.size()), hidden_, rows.data(), dy_rows.data(),
                                   dw);
  }

  // out[b, s, :] += P[position of s, :] (learned absolute positions; nothing without them).
  template <class T>
  void add_positions(const DLTensor* params, int64_t batch, int64_t seq, T* out) const {
    if (max_seq_ == 0) return;
    const T* pos = data<T>(params[1]);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < seq; ++t) {
        const T* row = pos + position(t, seq) * hidden_;
        T* o = out + (b * seq + t) * hidden_;
        for (int64_t i = 0; i < hidden_; ++i) o[i] += row[i];
      }
  }

  // Token t's position in its sequence: under context parallelism its global one (this rank holds
  // two chunks of each sequence, context_parallel.hpp).
  int64_t position(int64_t t, int64_t seq) const {
    return cp_.size() > 1 ? context_parallel_position(t, seq, cp_.rank(), cp_.size()) : t;
  }

  int64_t vocab_ = 0, hidden_ = 0;
  int64_t rows_ = 0, first_row_ = 0;  // this rank's rows of the padded vocabulary
  int64_t max_seq_ = 0;               // learned absolute positions: seq_length rows; 0: none
  plexus::sdk::Group cp_ = plexus::sdk::Group::find(plexus::sdk::Host::current(), "cp");
};

}  // namespace

const plx_component_desc* embedding_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<Embedding>(
      "transformer.embedding", "token embedding h = W[tokens] (embedding.word_embeddings.weight [V, C])",
      kEmptySchema);
  return &desc;
}

}  // namespace plexus::transformer

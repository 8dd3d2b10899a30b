// transformer.lm_head: logits = h W^T and the mean token cross-entropy (targets of -1 ignored).
#include <memory>

#include "common.hpp"
#include "cuda_layers.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/cross_entropy.hpp"
#include "plexus_kernels/embedding.hpp"
#include "plexus_kernels/gemm.hpp"
#include "vocab_parallel_loss.hpp"

namespace plexus::transformer {
namespace {

namespace k = plexus::kernels;
using k::Trans;

constexpr int32_t kIgnore = -1;

class HeadState : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
  // The tokens whose target is not -1 that the loss is a mean over: this rank's count, or under
  // context parallelism the cp ranks' mean count (integral when they count alike).
  double count = 0;
  k::Buffer h;        // the input hidden states [N, C]
  k::Buffer grad;     // softmax(logits) - onehot(target), zero rows for ignored targets, [N, V]
};

class LmHead final : public LayerShell<LmHead, HeadState> {
  friend class LayerShell<LmHead, HeadState>;

 public:
  explicit LmHead(const plx_layer_create_args& args)
      : LayerShell("transformer.lm_head", args, 2, 2, PLX_LAYER_PRODUCES_LOSS | PLX_LAYER_CONTEXT_PARALLEL) {
    const auto host = plexus::sdk::Host::current();
    const plx_config m = args.model_config;
    vocab_ = positive_int(host, m, "vocab_size");
    hidden_ = positive_int(host, m, "hidden_size");
    const double std_dev = positive_number(host, m, "init_method_std");
    const bool untie = host.config_bool(m, "untie_embeddings_and_output_weights");
    // Vocabulary-parallel like the embedding: rank r holds rows [r V_p / tp, (r + 1) V_p / tp) of
    // the padded vocabulary and computes those logits; the loss is vocab_parallel_cross_entropy.
    refuse_split_on_device();
    rows_ = split_over(tp_, padded_vocab_size(host, m), "padded_vocab_size");
    first_row_ = tp_.rank() * rows_;
    // Tied: the embedding's own name, which the engine recognizes as the same parameter.
    params_.push_back(make_param(untie ? "output_layer.weight" : "embedding.word_embeddings.weight",
                                 {rows_, hidden_}, PLX_INIT_NORMAL, std_dev, PLX_PARAM_VOCABULARY));
    mark_split(params_.back(), 0, {});
    if (on_cuda()) {
      HeadSpec spec;
      fill_spec(spec);
      spec.vocab = vocab_;
      spec.rows = rows_;
      spec.hidden = hidden_;
      device_impl_ = make_cuda_lm_head(spec);
    }
  }

  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    expect_descs("output_desc", num_inputs, num_outputs);
    expect_input_descs(inputs);
    // The input's dtype, except that bfloat16 hidden states (the CUDA path's mixed precision) give
    // float32 logits and loss: the softmax over the vocabulary runs in fp32 (see
    // cuda/lm_head_cuda.cpp). The CPU's forward refuses bfloat16, naming the tensor.
    const DLDataType dtype =
        plx_dtype_equal(inputs[0].dtype, plx_dtype_bf16()) ? plx_dtype_f32() : inputs[0].dtype;
    plx_tensor_desc loss{};
    loss.ndim = 1;
    loss.dtype = dtype;
    loss.dims[0] = 1;
    plx_tensor_desc logits{};
    logits.ndim = 3;
    logits.dtype = dtype;
    logits.dims[0] = inputs[1].dims[0];
    logits.dims[1] = inputs[1].dims[1];  // every token's (the targets'), under sequence parallelism too
    logits.dims[2] = rows_;              // this rank's columns of the padded vocabulary
    outputs[0] = loss;
    outputs[1] = logits;
  }

  // ABI 1.10: the hidden states (every token's, gathered under sequence parallelism) and the
  // logits' gradient softmax - onehot [N, this rank's vocabulary rows].
  double estimate_activation_bytes(uint32_t num_inputs, const plx_tensor_desc* inputs,
                                   const plx_activation_query& /*query*/) const override {
    expect_descs("estimate_activation_bytes", num_inputs, 2);
    expect_input_descs(inputs);
    refuse_estimate_on_device();
    const double n = static_cast<double>(inputs[1].dims[0]) * static_cast<double>(inputs[1].dims[1]);
    return element_bytes(inputs[0]) * n * static_cast<double>(hidden_ + rows_);
  }

  // Backward is seeded by the loss alone (a scalar): the precision is the one forward saved.
  Precision backward_precision(const HeadState& st, const plx_backward_args&) const {
    if (!st.saved) expect_saved(false, st.precision, st.precision, 0, 0, 0, 0);
    return st.precision;
  }

  // The logits product, 2 FLOPs per multiply-add ([N, C] x [C, V]); backward (input and weight
  // gradients) twice that. The softmax is not counted.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_descs("estimate_flops", num_inputs, 2);
    expect_input_descs(inputs);
    // Every token's logits (the targets' tokens: under sequence parallelism the hidden states are
    // this rank's block of them).
    const double n = static_cast<double>(inputs[1].dims[0]) * static_cast<double>(inputs[1].dims[1]);
    forward = 2 * n * static_cast<double>(hidden_) * static_cast<double>(rows_);
    backward = 2 * forward;
  }

 private:
  void expect_input_descs(const plx_tensor_desc* inputs) const {
    expect_hidden_desc(inputs[0], hidden_, "input 0 (hidden states)");
    if (!plx_dtype_equal(inputs[1].dtype, plx_dtype_i32()))
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "input 1 (targets): expected dtype int32, got " + plexus::sdk::dtype_name(inputs[1].dtype));
    // Under sequence parallelism the hidden states are this rank's block of the targets' tokens.
    const int64_t seq = sp_ ? inputs[0].dims[1] * tp_.size() : inputs[0].dims[1];
    if (inputs[1].ndim != 2 || inputs[1].dims[0] != inputs[0].dims[0] || inputs[1].dims[1] != seq)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "input 1 (targets): expected shape " +
                                                shape_text({inputs[0].dims[0], seq}) + ", got " +
                                                shape_text(inputs[1].dims, inputs[1].ndim));
  }

  template <class T>
  void run_forward(HeadState& st, const plx_forward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.inputs[0], device_, dt, hidden_, "input 0 (hidden states)", batch, seq);
    if (sp_) seq *= tp_.size();  // the hidden states are this rank's block of the tokens
    expect_tensor(args.inputs[1], device_, plx_dtype_i32(), {batch, seq}, "input 1 (targets)");
    expect_tensor(args.outputs[0], device_, dt, {1}, "output 0 (loss)");
    expect_tensor(args.outputs[1], device_, dt, {batch, seq, rows_}, "output 1 (logits)");
    expect_params(args.params, nullptr, dt);
    const int64_t n = batch * seq;
    const int32_t* targets = data<int32_t>(args.inputs[1]);
    if (const int64_t bad = k::first_invalid_id(n, targets, vocab_, true, kIgnore); bad >= 0)
      throw_invalid_target(targets[bad], bad, seq, vocab_);
    const bool train = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.saved = train;
    st.precision = precision_v<T>;
    st.batch = batch;
    st.seq = seq;

    // Under sequence parallelism every rank's block of the hidden states, gathered (Megatron's
    // all-gather before the column-parallel output layer).
    const T* h = data<T>(args.inputs[0]);
    k::Buffer gathered;
    if (sp_) {
      T* all = gathered.get<T>(static_cast<std::size_t>(n * hidden_));
      tp_.gather_rows(h, all, n / tp_.size(), hidden_, dt, device_);
      h = all;
    }
    T* logits = data<T>(args.outputs[1]);
    k::gemm_parallel<T>(Trans::N, Trans::T, n, rows_, hidden_, T(1), h, hidden_, data<T>(args.params[0]),
                        hidden_, T(0), logits, rows_);
    T* grad = train ? st.grad.get<T>(static_cast<std::size_t>(n * rows_)) : nullptr;
    const k::CrossEntropyResult ce =
        tp_.size() == 1
            ? k::cross_entropy_forward<T>(n, rows_, logits, targets, grad, kIgnore)
            : vocab_parallel_cross_entropy<T>(tp_, n, rows_, first_row_, logits, targets, grad, kIgnore);
    st.count = counted_share(ce.count);
    *data<T>(args.outputs[0]) = st.count > 0 ? static_cast<T>(ce.loss_sum / st.count) : T(0);
    if (train) {
      T* saved_h = st.h.get<T>(static_cast<std::size_t>(n * hidden_));
      for (int64_t i = 0; i < n * hidden_; ++i) saved_h[i] = h[i];
    }
  }

  template <class T>
  void run_backward(HeadState& st, const plx_backward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    // grad output 0: dL/dloss as a [1] tensor (float32 or float64: the engine seeds it in float32).
    const DLTensor& seed = args.grad_outputs[0];
    const Precision seed_precision = precision_of(seed.dtype, "grad output 0 (dL/dloss)");
    expect_tensor(seed, device_, seed.dtype, {1}, "grad output 0 (dL/dloss)");
    const double s =
        seed_precision == Precision::f32 ? static_cast<double>(*data<float>(seed)) : *data<double>(seed);
    // grad output 1 (logits) is not used: the loss is the only thing differentiated.
    const int64_t batch = st.batch, seq = st.seq, n = batch * seq;
    const int64_t local_seq = sp_ ? seq / tp_.size() : seq;  // sequence parallelism: this rank's block
    const DLTensor& dh_t = args.grad_inputs[0];
    if (dh_t.data != nullptr) expect_tensor(dh_t, device_, dt, {batch, local_seq, hidden_}, "grad input 0");
    expect_params(args.params, args.param_grads, dt);
    T* dh = dh_t.data != nullptr ? data<T>(dh_t) : nullptr;
    T* dw = grad_or_null<T>(args.param_grads, 0);

    if (st.count == 0) {  // the loss is the constant 0
      if (dh != nullptr)
        for (int64_t i = 0; i < batch * local_seq * hidden_; ++i) dh[i] = T(0);
      return;
    }
    const auto scale = static_cast<T>(s / st.count);
    const T* g = st.grad.data<T>();
    // logits = h W^T, dL/dlogits = scale * g:  dh = scale g W,  dW += scale g^T h. Under tp, dh
    // is this rank's columns' part, summed over tp while dW is computed: all-reduced, or under
    // sequence parallelism reduce-scattered to this rank's block of the tokens.
    plx_request dh_summed = nullptr;
    k::Buffer full;
    if (dh != nullptr) {
      T* dh_all = sp_ ? full.get<T>(static_cast<std::size_t>(n * hidden_)) : dh;
      k::gemm_parallel<T>(Trans::N, Trans::N, n, hidden_, rows_, scale, g, rows_, data<T>(args.params[0]),
                          hidden_, T(0), dh_all, hidden_);
      dh_summed = sp_ ? tp_.start_scatter_sum_rows(dh_all, dh, n / tp_.size(), hidden_, dt, device_)
                      : tp_.start_all_reduce(args.grad_inputs[0]);
    }
    if (dw != nullptr)
      k::gemm_parallel<T>(Trans::T, Trans::N, rows_, hidden_, n, scale, g, rows_, st.h.data<T>(), hidden_,
                          T(1), dw, hidden_);
    tp_.finish(dh_summed);
  }

  // What this rank's loss sum is divided by. Under context parallelism the host averages the cp
  // ranks' losses and gradients, so each divides by the ranks' mean count: their average is then
  // the mean over the whole sequences' counted tokens (Megatron's per-token loss), also where the
  // ranks count differently (a multi-token-prediction depth's ignored last targets all sit in
  // the last chunk, on cp rank 0).
  double counted_share(int64_t count) const {
    if (cp_.size() <= 1) return static_cast<double>(count);
    double total = static_cast<double>(count);
    int64_t one = 1;
    DLTensor view{&total, DLDevice{kDLCPU, 0}, 1, plx_dtype_f64(), &one, nullptr, 0};
    cp_.all_reduce(view);
    return total / static_cast<double>(cp_.size());
  }

  int64_t vocab_ = 0, hidden_ = 0;    // vocab_size: the ids a target may be
  int64_t rows_ = 0, first_row_ = 0;  // this rank's rows of the padded vocabulary
  plexus::sdk::Group cp_ = plexus::sdk::Group::find(plexus::sdk::Host::current(), "cp");
};

}  // namespace

const plx_component_desc* lm_head_component() {
  static const plx_component_desc desc =
      plexus::sdk::layer_component<LmHead>("transformer.lm_head",
                                           "output layer and loss: logits = h W^T, loss = mean cross-entropy "
                                           "over targets != -1 (tied or untied W)",
                                           kEmptySchema);
  return &desc;
}

}  // namespace plexus::transformer

// transformer.attention: pre-norm causal self-attention with grouped query heads and rotary
// embeddings, F only (the stack adds the residual). See ../README.md for the math and layout.
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "common.hpp"
#include "cuda_layers.hpp"
#include "plexus_kernels/attention.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/gemm.hpp"
#include "plexus_kernels/rope.hpp"
#include "split_weights.hpp"

namespace plexus::transformer {
namespace {

namespace k = plexus::kernels;
using k::Trans;

class AttentionState : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
  k::Buffer xhat, rstd;  // the pre-norm: normalized input and 1/std per token
  k::Buffer qkv;         // u Wqkv^T with RoPE applied to q and k, [N, (nh + 2 ng) hd]
  k::Buffer probs;       // softmax probabilities [B, nh, S, S]
  k::Buffer out;         // attention output before the projection, [N, nh hd]
  // Weight gradients apart (PLX_BACKWARD_SKIP_WEIGHT_GRADS): the upstream gradient of each weight
  // product, kept by backward for backward_weights (their other operands: out above, and the
  // norm's output again from xhat), released once it ran.
  bool weights_due = false;
  k::Buffer dy;    // the output gradient [N, C]: the output projection's
  k::Buffer dqkv;  // the qkv projection's output gradient (after RoPE's transpose)
  k::Buffer du;    // the pre-norm output's gradient [N, C]: the norm weight's (and bias's)
};

class Attention final : public SplitHiddenLayer<Attention, AttentionState> {
  friend class LayerShell<Attention, AttentionState>;
  friend class SplitHiddenLayer<Attention, AttentionState>;

 public:
  explicit Attention(const plx_layer_create_args& args) : SplitHiddenLayer("transformer.attention", args) {
    const auto host = plexus::sdk::Host::current();
    const plx_config m = args.model_config;
    heads_ = positive_int(host, m, "num_attention_heads");
    groups_ = positive_int(host, m, "num_query_groups");
    const int64_t layers = positive_int(host, m, "num_layers");
    max_seq_ = positive_int(host, m, "seq_length");
    norm_ = NormSpec::read(host, m, hidden_);
    const double rope_base = positive_number(host, m, "rotary_base");
    const double std_dev = positive_number(host, m, "init_method_std");
    if (hidden_ % heads_ != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "hidden_size (" + std::to_string(hidden_) +
                                                ") is not divisible by num_attention_heads (" +
                                                std::to_string(heads_) + ")");
    if (heads_ % groups_ != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "num_attention_heads (" + std::to_string(heads_) +
                                                ") is not divisible by num_query_groups (" +
                                                std::to_string(groups_) + ")");
    head_dim_ = hidden_ / heads_;
    if (head_dim_ % 2 != 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "the head dimension hidden_size / num_attention_heads = " + std::to_string(hidden_) +
                      " / " + std::to_string(heads_) + " = " + std::to_string(head_dim_) +
                      " must be even for rotary embeddings");
    qkv_rows_ = (heads_ + 2 * groups_) * head_dim_;

    params_.push_back(
        make_param("input_layernorm.weight", {hidden_}, PLX_INIT_ONES, 0, PLX_PARAM_NO_WEIGHT_DECAY));
    if (!norm_.rms)
      params_.push_back(
          make_param("input_layernorm.bias", {hidden_}, PLX_INIT_ZEROS, 0, PLX_PARAM_NO_WEIGHT_DECAY));
    qkv_index_ = static_cast<uint32_t>(params_.size());
    params_.push_back(
        make_param("self_attention.linear_qkv.weight", {qkv_rows_, hidden_}, PLX_INIT_NORMAL, std_dev, 0));
    params_.push_back(make_param("self_attention.linear_proj.weight", {hidden_, heads_ * head_dim_},
                                 PLX_INIT_NORMAL, output_init_std(host, m, std_dev, layers), 0));

    // RoPE is applied in place to the query heads and the key head of every group.
    const int64_t per = heads_ / groups_;
    for (int64_t g = 0; g < groups_; ++g)
      for (int64_t j = 0; j <= per; ++j) rope_columns_.push_back(g * (per + 2) * head_dim_ + j * head_dim_);
    if (on_cuda()) {  // the GPU builds its own rotary tables
      AttentionSpec spec;
      fill_spec(spec);
      spec.hidden = hidden_;
      spec.heads = heads_;
      spec.groups = groups_;
      spec.head_dim = head_dim_;
      spec.qkv_rows = qkv_rows_;
      spec.max_seq = max_seq_;
      spec.rope_base = rope_base;
      spec.norm = norm_;
      spec.qkv_index = qkv_index_;
      spec.rope_columns = rope_columns_;
      device_impl_ = make_cuda_attention(spec);
      return;
    }
    const auto table = static_cast<std::size_t>(max_seq_ * head_dim_ / 2);
    cos_f_.resize(table);
    sin_f_.resize(table);
    cos_d_.resize(table);
    sin_d_.resize(table);
    k::rope_tables<float>(max_seq_, head_dim_, rope_base, cos_f_.data(), sin_f_.data());
    k::rope_tables<double>(max_seq_, head_dim_, rope_base, cos_d_.data(), sin_d_.data());
  }

  // Matrix products only, 2 FLOPs per multiply-add: the qkv and output projections, and QK^T and
  // PV over the S (S + 1) / 2 query-key pairs the causal mask keeps, the work that is computed
  // (Megatron's own count takes the full S x S, which would credit the kernels with the masked
  // half they skip). Backward: twice the forward.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_descs("estimate_flops", num_inputs, 1);
    expect_hidden_desc(inputs[0]);
    const auto b = static_cast<double>(inputs[0].dims[0]), s = static_cast<double>(inputs[0].dims[1]);
    const double n = b * s, c = static_cast<double>(hidden_), dq = static_cast<double>(heads_ * head_dim_);
    forward = 2 * n * c * static_cast<double>(qkv_rows_) + 2 * n * dq * c +
              2 * 2 * b * static_cast<double>(heads_) * (s * (s + 1) / 2) * static_cast<double>(head_dim_);
    backward = 2 * forward;
  }

 private:
  template <class T>
  const T* cos_table() const {
    if constexpr (std::is_same_v<T, float>)
      return cos_f_.data();
    else
      return cos_d_.data();
  }
  template <class T>
  const T* sin_table() const {
    if constexpr (std::is_same_v<T, float>)
      return sin_f_.data();
    else
      return sin_d_.data();
  }

  k::AttentionLayout layout(int64_t batch, int64_t seq) const {
    return k::AttentionLayout::megatron(batch, seq, heads_, groups_, head_dim_);
  }

  template <class T>
  void run_forward(AttentionState& st, const plx_forward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.inputs[0], device_, dt, hidden_, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], device_, dt, {batch, seq, hidden_}, "output 0");
    expect_params(args.params, nullptr, dt);
    if (seq > max_seq_)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "sequence length " + std::to_string(seq) +
                                                " exceeds model seq_length " + std::to_string(max_seq_));
    const int64_t n = batch * seq, dq = heads_ * head_dim_;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    const bool train = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.saved = train;
    st.precision = precision_v<T>;
    st.batch = batch;
    st.seq = seq;

    const T* w_norm = data<T>(args.params[0]);
    const T* b_norm = norm_.rms ? nullptr : data<T>(args.params[1]);
    const T* w_qkv = data<T>(args.params[qkv_index_]);
    const T* w_proj = data<T>(args.params[qkv_index_ + 1]);

    k::Buffer u_buf, qkv_local, out_local;
    T* u = u_buf.get<T>(sz(n * hidden_));
    T* xhat = train ? st.xhat.get<T>(sz(n * hidden_)) : nullptr;
    T* rstd = train ? st.rstd.get<T>(sz(n)) : nullptr;
    norm_.forward<T>(n, data<T>(args.inputs[0]), w_norm, b_norm, u, xhat, rstd);

    T* qkv = (train ? st.qkv : qkv_local).get<T>(sz(n * qkv_rows_));
    k::gemm_parallel<T>(Trans::N, Trans::T, n, qkv_rows_, hidden_, T(1), u, hidden_, w_qkv, hidden_, T(0),
                        qkv, qkv_rows_);
    k::rope_apply<T>(qkv, n, seq, qkv_rows_, rope_columns_.data(), static_cast<int64_t>(rope_columns_.size()),
                     head_dim_, cos_table<T>(), sin_table<T>(), false);

    T* o = (train ? st.out : out_local).get<T>(sz(n * dq));
    T* probs = train ? st.probs.get<T>(sz(batch * heads_ * seq * seq)) : nullptr;
    k::attention_forward<T>(layout(batch, seq), qkv, o, probs);

    k::gemm_parallel<T>(Trans::N, Trans::T, n, hidden_, dq, T(1), o, dq, w_proj, dq, T(0),
                        data<T>(args.outputs[0]), hidden_);
  }

  // With PLX_BACKWARD_SKIP_WEIGHT_GRADS: the input gradient only, and the weight gradients'
  // upstream gradients kept in the state for run_backward_weights.
  template <class T>
  void run_backward(AttentionState& st, const plx_backward_args& args) {
    const auto [batch, seq, dy, dx] = expect_backward<T>(st, args);
    const int64_t n = batch * seq, dq = heads_ * head_dim_;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    const bool split = skips_weight_grads(args);

    const T* w_norm = data<T>(args.params[0]);
    const T* b_norm = norm_.rms ? nullptr : data<T>(args.params[1]);
    const T* w_qkv = data<T>(args.params[qkv_index_]);
    const T* w_proj = data<T>(args.params[qkv_index_ + 1]);
    const T* o = st.out.data<T>();

    // f = o Wproj^T:  do = df Wproj,  dWproj += df^T o.
    k::Buffer do_buf, dqkv_buf, work_buf;
    T* d_o = do_buf.get<T>(sz(n * dq));
    k::gemm_parallel<T>(Trans::N, Trans::N, n, dq, hidden_, T(1), dy, hidden_, w_proj, dq, T(0), d_o, dq);
    if (split)
      std::copy(dy, dy + n * hidden_, st.dy.get<T>(sz(n * hidden_)));
    else
      proj_weights<T>(n, dy, o, grad_or_null<T>(args.param_grads, qkv_index_ + 1));

    // The attention core, then RoPE's transpose on the q and k gradients.
    T* dqkv = (split ? st.dqkv : dqkv_buf).get<T>(sz(n * qkv_rows_));
    k::attention_backward<T>(layout(batch, seq), st.qkv.data<T>(), st.probs.data<T>(), o, d_o, dqkv);
    k::rope_apply<T>(dqkv, n, seq, qkv_rows_, rope_columns_.data(),
                     static_cast<int64_t>(rope_columns_.size()), head_dim_, cos_table<T>(), sin_table<T>(),
                     true);

    // qkv = u Wqkv^T:  dWqkv += dqkv^T u,  du = dqkv Wqkv; then the norm's backward.
    if (split) {
      // backward_weights needs dqkv and out, not the core's qkv and probabilities.
      st.qkv.release();
      st.probs.release();
      T* du = st.du.get<T>(sz(n * hidden_));
      k::gemm_parallel<T>(Trans::N, Trans::N, n, hidden_, qkv_rows_, T(1), dqkv, qkv_rows_, w_qkv, hidden_,
                          T(0), du, hidden_);
      // The input gradient now; the norm's weight gradients from the same du later (the kernel
      // sums the same partial products whether or not it also writes dx).
      if (dx != nullptr)
        norm_.backward<T>(n, du, st.xhat.data<T>(), st.rstd.data<T>(), w_norm, dx, nullptr, nullptr);
      return;
    }
    T* dw_norm = grad_or_null<T>(args.param_grads, 0);
    T* db_norm = norm_.rms ? nullptr : grad_or_null<T>(args.param_grads, 1);
    T* work = work_buf.get<T>(sz(n * hidden_));  // u, then du
    input_projection_weights<T>(norm_, n, qkv_rows_, dqkv, w_norm, b_norm, st.xhat.data<T>(), work,
                                grad_or_null<T>(args.param_grads, qkv_index_));
    if (dx != nullptr || dw_norm != nullptr || db_norm != nullptr) {
      k::gemm_parallel<T>(Trans::N, Trans::N, n, hidden_, qkv_rows_, T(1), dqkv, qkv_rows_, w_qkv, hidden_,
                          T(0), work, hidden_);
      norm_.backward<T>(n, work, st.xhat.data<T>(), st.rstd.data<T>(), w_norm, dx, dw_norm, db_norm);
    }
  }

  // The weight gradients a backward with PLX_BACKWARD_SKIP_WEIGHT_GRADS left out, from what it
  // kept, through the same calls as the unsplit backward; then what was kept is released.
  template <class T>
  void run_backward_weights(AttentionState& st, const plx_backward_args& args) {
    const int64_t n = st.batch * st.seq;
    proj_weights<T>(n, st.dy.data<T>(), st.out.data<T>(), grad_or_null<T>(args.param_grads, qkv_index_ + 1));
    prenorm_weights<T>(norm_, n, qkv_rows_, qkv_index_, st.dqkv.data<T>(), st.xhat.data<T>(),
                       st.rstd.data<T>(), st.du.data<T>(), args);
    for (k::Buffer* kept : {&st.dy, &st.dqkv, &st.du, &st.out, &st.xhat, &st.rstd}) kept->release();
    st.saved = false;  // what a backward needs is gone
  }

  // dWproj += df^T o (dw_proj may be null: no gradient wanted).
  template <class T>
  void proj_weights(int64_t n, const T* dy, const T* o, T* dw_proj) const {
    const int64_t dq = heads_ * head_dim_;
    if (dw_proj != nullptr)
      k::gemm_parallel<T>(Trans::T, Trans::N, hidden_, dq, n, T(1), dy, hidden_, o, dq, T(1), dw_proj, dq);
  }
  int64_t heads_ = 0, groups_ = 0, head_dim_ = 0, qkv_rows_ = 0, max_seq_ = 0;
  uint32_t qkv_index_ = 1;
  NormSpec norm_;
  std::vector<int64_t> rope_columns_;
  std::vector<float> cos_f_, sin_f_;
  std::vector<double> cos_d_, sin_d_;
};

}  // namespace

const plx_component_desc* attention_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<Attention>(
      "transformer.attention",
      "pre-norm causal self-attention (GQA, rotary, Megatron qkv layout), F only: f = proj(attn(norm(x)))",
      kEmptySchema);
  return &desc;
}

}  // namespace plexus::transformer

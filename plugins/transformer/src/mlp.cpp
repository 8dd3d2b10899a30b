// transformer.mlp: pre-norm MLP, F only: f = act(norm(x) W1^T) W2^T with gelu (exact) or swiglu.
#include <algorithm>
#include <cmath>
#include <memory>

#include "common.hpp"
#include "cuda_layers.hpp"
#include "plexus_kernels/activation.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/gemm.hpp"
#include "split_weights.hpp"

namespace plexus::transformer {
namespace {

namespace k = plexus::kernels;
using k::Trans;

class MlpState : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
  k::Buffer xhat, rstd;  // the pre-norm
  k::Buffer a;           // fc1 output (pre-activation), [N, F] or [N, 2F]
  k::Buffer act;         // activation output, [N, F]
  // Weight gradients apart (PLX_BACKWARD_SKIP_WEIGHT_GRADS): the upstream gradient of each weight
  // product, kept by backward for backward_weights (their other operands: act above, and the
  // norm's output again from xhat), released once it ran.
  bool weights_due = false;
  k::Buffer dy;  // the output gradient [N, C]: fc2's
  k::Buffer da;  // fc1's output gradient [N, F] or [N, 2F]
  k::Buffer du;  // the pre-norm output's gradient [N, C]: the norm weight's (and bias's)
};

class Mlp final : public SplitHiddenLayer<Mlp, MlpState> {
  friend class LayerShell<Mlp, MlpState>;
  friend class SplitHiddenLayer<Mlp, MlpState>;

 public:
  explicit Mlp(const plx_layer_create_args& args) : SplitHiddenLayer("transformer.mlp", args) {
    const auto host = plexus::sdk::Host::current();
    const plx_config m = args.model_config;
    ffn_ = positive_int(host, m, "ffn_hidden_size");
    const int64_t layers = positive_int(host, m, "num_layers");
    norm_ = NormSpec::read(host, m, hidden_);
    const double std_dev = positive_number(host, m, "init_method_std");
    const std::string activation = host.config_string(m, "activation");
    if (activation == "gelu") {
      swiglu_ = false;
    } else if (activation == "swiglu") {
      swiglu_ = true;
    } else {
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "model activation must be \"gelu\" or \"swiglu\", got \"" + activation + "\"");
    }
    fc1_rows_ = swiglu_ ? 2 * ffn_ : ffn_;

    params_.push_back(
        make_param("pre_mlp_layernorm.weight", {hidden_}, PLX_INIT_ONES, 0, PLX_PARAM_NO_WEIGHT_DECAY));
    if (!norm_.rms)
      params_.push_back(
          make_param("pre_mlp_layernorm.bias", {hidden_}, PLX_INIT_ZEROS, 0, PLX_PARAM_NO_WEIGHT_DECAY));
    fc1_index_ = static_cast<uint32_t>(params_.size());
    params_.push_back(make_param("mlp.linear_fc1.weight", {fc1_rows_, hidden_}, PLX_INIT_NORMAL, std_dev, 0));
    params_.push_back(make_param("mlp.linear_fc2.weight", {hidden_, ffn_}, PLX_INIT_NORMAL,
                                 output_init_std(host, m, std_dev, layers), 0));
    if (on_cuda()) {
      MlpSpec spec;
      fill_spec(spec);
      spec.hidden = hidden_;
      spec.ffn = ffn_;
      spec.fc1_rows = fc1_rows_;
      spec.swiglu = swiglu_;
      spec.norm = norm_;
      spec.fc1_index = fc1_index_;
      device_impl_ = make_cuda_mlp(spec);
    }
  }

  // Matrix products only, 2 FLOPs per multiply-add: fc1 ([N, C] x [C, F or 2F]) and fc2
  // ([N, F] x [F, C]). Backward (input and weight gradients): twice the forward.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_descs("estimate_flops", num_inputs, 1);
    expect_hidden_desc(inputs[0]);
    const double n = static_cast<double>(inputs[0].dims[0]) * static_cast<double>(inputs[0].dims[1]);
    forward = 2 * n * static_cast<double>(hidden_) * static_cast<double>(fc1_rows_ + ffn_);
    backward = 2 * forward;
  }

 private:
  template <class T>
  void run_forward(MlpState& st, const plx_forward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.inputs[0], device_, dt, hidden_, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], device_, dt, {batch, seq, hidden_}, "output 0");
    expect_params(args.params, nullptr, dt);
    const int64_t n = batch * seq;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    const bool train = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.saved = train;
    st.precision = precision_v<T>;
    st.batch = batch;
    st.seq = seq;

    const T* w_norm = data<T>(args.params[0]);
    const T* b_norm = norm_.rms ? nullptr : data<T>(args.params[1]);
    const T* w1 = data<T>(args.params[fc1_index_]);
    const T* w2 = data<T>(args.params[fc1_index_ + 1]);

    k::Buffer u_buf, a_local, act_local;
    T* u = u_buf.get<T>(sz(n * hidden_));
    T* xhat = train ? st.xhat.get<T>(sz(n * hidden_)) : nullptr;
    T* rstd = train ? st.rstd.get<T>(sz(n)) : nullptr;
    norm_.forward<T>(n, data<T>(args.inputs[0]), w_norm, b_norm, u, xhat, rstd);

    T* a = (train ? st.a : a_local).get<T>(sz(n * fc1_rows_));
    k::gemm_parallel<T>(Trans::N, Trans::T, n, fc1_rows_, hidden_, T(1), u, hidden_, w1, hidden_, T(0), a,
                        fc1_rows_);
    T* act = (train ? st.act : act_local).get<T>(sz(n * ffn_));
    if (swiglu_)
      k::swiglu_forward<T>(n, ffn_, a, act);
    else
      k::gelu_forward<T>(n * ffn_, a, act);
    k::gemm_parallel<T>(Trans::N, Trans::T, n, hidden_, ffn_, T(1), act, ffn_, w2, ffn_, T(0),
                        data<T>(args.outputs[0]), hidden_);
  }

  // With PLX_BACKWARD_SKIP_WEIGHT_GRADS: the input gradient only, and the weight gradients'
  // upstream gradients kept in the state for run_backward_weights.
  template <class T>
  void run_backward(MlpState& st, const plx_backward_args& args) {
    const auto [batch, seq, dy, dx] = expect_backward<T>(st, args);
    const int64_t n = batch * seq;
    const auto sz = [](int64_t v) { return static_cast<std::size_t>(v); };
    const bool split = skips_weight_grads(args);

    const T* w_norm = data<T>(args.params[0]);
    const T* b_norm = norm_.rms ? nullptr : data<T>(args.params[1]);
    const T* w1 = data<T>(args.params[fc1_index_]);
    const T* w2 = data<T>(args.params[fc1_index_ + 1]);
    const T* a = st.a.data<T>();

    // f = act W2^T:  dact = df W2,  dW2 += df^T act.
    k::Buffer dact_buf, da_buf, work_buf;
    T* dact = (split && !swiglu_ ? st.da : dact_buf).get<T>(sz(n * ffn_));  // gelu: da in place
    k::gemm_parallel<T>(Trans::N, Trans::N, n, ffn_, hidden_, T(1), dy, hidden_, w2, ffn_, T(0), dact, ffn_);
    if (split)
      std::copy(dy, dy + n * hidden_, st.dy.get<T>(sz(n * hidden_)));
    else
      fc2_weights<T>(n, dy, st.act.data<T>(), grad_or_null<T>(args.param_grads, fc1_index_ + 1));

    // Through the activation.
    T* da = swiglu_ ? (split ? st.da : da_buf).get<T>(sz(n * fc1_rows_)) : dact;
    if (swiglu_)
      k::swiglu_backward<T>(n, ffn_, a, dact, da);
    else
      k::gelu_backward<T>(n * ffn_, a, dact, da);

    // a = u W1^T:  dW1 += da^T u,  du = da W1; then the norm's backward.
    if (split) {
      st.a.release();  // backward_weights needs da, not a
      T* du = st.du.get<T>(sz(n * hidden_));
      k::gemm_parallel<T>(Trans::N, Trans::N, n, hidden_, fc1_rows_, T(1), da, fc1_rows_, w1, hidden_, T(0),
                          du, hidden_);
      // The input gradient now; the norm's weight gradients from the same du later (the kernel
      // sums the same partial products whether or not it also writes dx).
      if (dx != nullptr)
        norm_.backward<T>(n, du, st.xhat.data<T>(), st.rstd.data<T>(), w_norm, dx, nullptr, nullptr);
      return;
    }
    T* dw_norm = grad_or_null<T>(args.param_grads, 0);
    T* db_norm = norm_.rms ? nullptr : grad_or_null<T>(args.param_grads, 1);
    T* work = work_buf.get<T>(sz(n * hidden_));  // u, then du
    input_projection_weights<T>(norm_, n, fc1_rows_, da, w_norm, b_norm, st.xhat.data<T>(), work,
                                grad_or_null<T>(args.param_grads, fc1_index_));
    if (dx != nullptr || dw_norm != nullptr || db_norm != nullptr) {
      k::gemm_parallel<T>(Trans::N, Trans::N, n, hidden_, fc1_rows_, T(1), da, fc1_rows_, w1, hidden_, T(0),
                          work, hidden_);
      norm_.backward<T>(n, work, st.xhat.data<T>(), st.rstd.data<T>(), w_norm, dx, dw_norm, db_norm);
    }
  }

  // The weight gradients a backward with PLX_BACKWARD_SKIP_WEIGHT_GRADS left out, from what it
  // kept, through the same calls as the unsplit backward; then what was kept is released.
  template <class T>
  void run_backward_weights(MlpState& st, const plx_backward_args& args) {
    const int64_t n = st.batch * st.seq;
    fc2_weights<T>(n, st.dy.data<T>(), st.act.data<T>(), grad_or_null<T>(args.param_grads, fc1_index_ + 1));
    prenorm_weights<T>(norm_, n, fc1_rows_, fc1_index_, st.da.data<T>(), st.xhat.data<T>(), st.rstd.data<T>(),
                       st.du.data<T>(), args);
    for (k::Buffer* kept : {&st.dy, &st.da, &st.du, &st.act, &st.xhat, &st.rstd}) kept->release();
    st.saved = false;  // what a backward needs is gone
  }

  // dW2 += df^T act (dw2 may be null: no gradient wanted).
  template <class T>
  void fc2_weights(int64_t n, const T* dy, const T* act, T* dw2) const {
    if (dw2 != nullptr)
      k::gemm_parallel<T>(Trans::T, Trans::N, hidden_, ffn_, n, T(1), dy, hidden_, act, ffn_, T(1), dw2,
                          ffn_);
  }
  int64_t ffn_ = 0, fc1_rows_ = 0;
  bool swiglu_ = false;
  uint32_t fc1_index_ = 1;
  NormSpec norm_;
};

}  // namespace

const plx_component_desc* mlp_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<Mlp>(
      "transformer.mlp", "pre-norm MLP (gelu or swiglu), F only: f = fc2(act(fc1(norm(x))))", kEmptySchema);
  return &desc;
}

}  // namespace plexus::transformer

// transformer.mlp: pre-norm MLP, F only: f = act(norm(x) W1^T) W2^T with gelu (exact) or swiglu.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "common.hpp"
#include "cuda_layers.hpp"
#include "plexus_kernels/activation.hpp"
#include "plexus_kernels/buffer.hpp"
#include "prenorm_layer.hpp"

namespace plexus::transformer {
namespace {

namespace k = plexus::kernels;

// The state is PreNormState: in is a, fc1's output (pre-activation), [N, F] or [N, 2F]; mid the
// activation output act, [N, F]; d_in fc1's output gradient da.
using MlpState = PreNormState;

class Mlp final : public PreNormLayer<Mlp, MlpState> {
 public:
  explicit Mlp(const plx_layer_create_args& args) : PreNormLayer("transformer.mlp", args) {
    const auto host = plexus::sdk::Host::current();
    const plx_config m = args.model_config;
    const std::string activation = host.config_string(m, "activation");
    if (activation == "gelu") {
      swiglu_ = false;
    } else if (activation == "swiglu") {
      swiglu_ = true;
    } else {
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  "model activation must be \"gelu\" or \"swiglu\", got \"" + activation + "\"");
    }
    const int64_t ffn = positive_int(host, m, "ffn_hidden_size");
    // Tensor parallelism: each rank holds ffn_hidden_size / tp of the MLP's width; SwiGLU's fc1
    // is two parts, gate and up, so rank r holds [gate_r; up_r] (Megatron's stride-2 split).
    refuse_split_on_device();
    ffn_ = split_over(tp_, ffn, "ffn_hidden_size");
    fc1_rows_ = swiglu_ ? 2 * ffn_ : ffn_;

    add_parameters(
        {"pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias", "mlp.linear_fc1.weight",
         "mlp.linear_fc2.weight", "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.layer_norm_bias"},
        fc1_rows_, ffn_, output_init_std(args, init_std_),
        swiglu_ ? std::vector<int64_t>{ffn, ffn} : std::vector<int64_t>{});
    if (on_cuda()) {
      MlpSpec spec;
      fill_spec(spec);
      spec.swiglu = swiglu_;
      device_impl_ = make_cuda_mlp(spec);
    }
  }

  // Matrix products only, 2 FLOPs per multiply-add: fc1 ([N, C] x [C, F or 2F]) and fc2
  // ([N, F] x [F, C]). Backward (input and weight gradients): twice the forward.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_descs("estimate_flops", num_inputs, 1);
    expect_hidden_desc(inputs[0]);
    // Under sequence parallelism the products run on every rank's block of the tokens.
    const double n = static_cast<double>(inputs[0].dims[0]) *
                     static_cast<double>(inputs[0].dims[1] * (sp_ ? tp_.size() : 1));
    forward = 2 * n * static_cast<double>(hidden_) * static_cast<double>(fc1_rows_ + ffn_);
    backward = 2 * forward;
  }

 private:
  // What PreNormLayer calls (its in is a, fc1's output, and its mid act [N, F]).
  friend class PreNormLayer<Mlp, MlpState>;

  template <class T>
  void core_forward(MlpState&, const Tokens& t, bool, T* a, T* act) const {
    if (swiglu_)
      k::swiglu_forward<T>(t.n, ffn_, a, act);
    else
      k::gelu_forward<T>(t.n * ffn_, a, act);
  }

  // gelu's da is written over dact, so a split backward writes dact where it keeps da.
  k::Buffer& mid_gradient_buffer(MlpState& st, bool split, k::Buffer& call) const {
    return split && !swiglu_ ? st.d_in : call;
  }

  // Through the activation (swiglu's gradient has both halves of a): da from dact.
  template <class T>
  const T* core_backward(MlpState& st, const Tokens& t, bool split, T* dact, k::Buffer& call_da) const {
    const T* a = st.in.data<T>();
    T* da = swiglu_ ? (split ? st.d_in : call_da).get<T>(sz(t.n * fc1_rows_)) : dact;
    if (swiglu_)
      k::swiglu_backward<T>(t.n, ffn_, a, dact, da);
    else
      k::gelu_backward<T>(t.n * ffn_, a, dact, da);
    if (split) st.in.release();  // backward_weights needs da, not a
    return da;
  }

  int64_t ffn_ = 0, fc1_rows_ = 0;
  bool swiglu_ = false;
};

}  // namespace

const plx_component_desc* mlp_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<Mlp>(
      "transformer.mlp", "pre-norm MLP (gelu or swiglu), F only: f = fc2(act(fc1(norm(x))))", kEmptySchema);
  return &desc;
}

}  // namespace plexus::transformer

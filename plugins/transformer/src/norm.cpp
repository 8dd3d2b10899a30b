// transformer.norm: the final normalization, y = norm(x) (RMSNorm or LayerNorm per the model).
#include <memory>

#include "common.hpp"
#include "cuda_layers.hpp"
#include "plexus_kernels/buffer.hpp"

namespace plexus::transformer {
namespace {

class NormState : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
  kernels::Buffer xhat, rstd;
};

class FinalNorm final : public HiddenLayer<FinalNorm, NormState> {
  friend class LayerShell<FinalNorm, NormState>;

 public:
  // ABI 1.10: the normalized input and 1/std per token.
  double estimate_activation_bytes(uint32_t num_inputs, const plx_tensor_desc* inputs,
                                   const plx_activation_query& /*query*/) const override {
    expect_descs("estimate_activation_bytes", num_inputs, 1);
    expect_hidden_desc(inputs[0]);
    refuse_estimate_on_device();
    const double rows = static_cast<double>(inputs[0].dims[0]) * static_cast<double>(inputs[0].dims[1]);
    return element_bytes(inputs[0]) * rows * static_cast<double>(hidden_ + 1);
  }

  explicit FinalNorm(const plx_layer_create_args& args) : HiddenLayer("transformer.norm", args) {
    const auto host = plexus::sdk::Host::current();
    norm_ = NormSpec::read(host, args.model_config, hidden_);
    params_.push_back(
        make_param("weight", {hidden_}, PLX_INIT_ONES, 0, PLX_PARAM_NO_WEIGHT_DECAY | token_partial()));
    if (!norm_.rms)
      params_.push_back(
          make_param("bias", {hidden_}, PLX_INIT_ZEROS, 0, PLX_PARAM_NO_WEIGHT_DECAY | token_partial()));
    if (on_cuda()) {
      NormLayerSpec spec;
      fill_spec(spec);
      spec.hidden = hidden_;
      spec.norm = norm_;
      device_impl_ = make_cuda_norm(spec);
    }
  }

  // Only matrix products are counted (the convention of model-FLOP utilization); a norm has none.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc*, double& forward,
                      double& backward) const override {
    expect_descs("estimate_flops", num_inputs, 1);
    forward = 0;
    backward = 0;
  }

 private:
  template <class T>
  void run_forward(NormState& st, const plx_forward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.inputs[0], device_, dt, hidden_, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], device_, dt, {batch, seq, hidden_}, "output 0");
    expect_params(args.params, nullptr, dt);
    const int64_t rows = batch * seq;
    const T* w = data<T>(args.params[0]);
    const T* b = norm_.rms ? nullptr : data<T>(args.params[1]);
    st.saved = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.precision = precision_v<T>;
    st.batch = batch;
    st.seq = seq;
    T* xhat = st.saved ? st.xhat.get<T>(static_cast<std::size_t>(rows * hidden_)) : nullptr;
    T* rstd = st.saved ? st.rstd.get<T>(static_cast<std::size_t>(rows)) : nullptr;
    norm_.forward<T>(rows, data<T>(args.inputs[0]), w, b, data<T>(args.outputs[0]), xhat, rstd);
  }

  template <class T>
  void run_backward(NormState& st, const plx_backward_args& args) {
    const auto [batch, seq, dy, dx] = expect_backward<T>(st, args);
    norm_.backward<T>(batch * seq, dy, st.xhat.data<T>(), st.rstd.data<T>(), data<T>(args.params[0]), dx,
                      grad_or_null<T>(args.param_grads, 0),
                      norm_.rms ? nullptr : grad_or_null<T>(args.param_grads, 1));
  }

  NormSpec norm_;
};

}  // namespace

const plx_component_desc* norm_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<FinalNorm>(
      "transformer.norm", "final normalization y = norm(x) (RMSNorm or LayerNorm per model.normalization)",
      kEmptySchema);
  return &desc;
}

}  // namespace plexus::transformer

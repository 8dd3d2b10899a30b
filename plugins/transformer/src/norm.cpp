// transformer.norm: the final normalization, y = norm(x) (RMSNorm or LayerNorm per the model).
#include <memory>

#include "common.hpp"
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

class FinalNorm final : public TransformerLayer {
 public:
  explicit FinalNorm(const plx_layer_create_args& args) : TransformerLayer("transformer.norm", args) {
    const auto host = plexus::sdk::Host::current();
    hidden_ = positive_int(host, args.model_config, "hidden_size");
    norm_ = NormSpec::read(host, args.model_config, hidden_);
    params_.push_back(make_param("weight", {hidden_}, PLX_INIT_ONES, 0, PLX_PARAM_NO_WEIGHT_DECAY));
    if (!norm_.rms)
      params_.push_back(make_param("bias", {hidden_}, PLX_INIT_ZEROS, 0, PLX_PARAM_NO_WEIGHT_DECAY));
  }

  plx_layer_info info() const override {
    plx_layer_info i{};
    i.struct_size = sizeof(i);
    i.num_params = static_cast<uint32_t>(params_.size());
    i.num_stages = 1;
    i.num_inputs = 1;
    i.num_outputs = 1;
    return i;
  }

  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    expect_descs("output_desc", num_inputs, num_outputs);
    precision_of(inputs[0].dtype, "input 0 (hidden states)");
    if (inputs[0].ndim != 3 || inputs[0].dims[2] != hidden_)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "input 0 (hidden states): expected shape [batch, seq, " +
                                                std::to_string(hidden_) + "], got " +
                                                shape_string(inputs[0].dims, inputs[0].ndim));
    outputs[0] = inputs[0];
  }

  std::unique_ptr<plexus::sdk::LayerState> create_state(uint32_t) override {
    return std::make_unique<NormState>();
  }

  void forward(plexus::sdk::LayerState& state, uint32_t stage, const plx_forward_args& args) override {
    expect_call("forward", stage, args.num_inputs, args.num_outputs, args.num_params);
    if (precision_of(args.inputs[0].dtype, "input 0 (hidden states)") == Precision::f32)
      run_forward<float>(static_cast<NormState&>(state), args);
    else
      run_forward<double>(static_cast<NormState&>(state), args);
  }

  void backward(plexus::sdk::LayerState& state, uint32_t stage, const plx_backward_args& args) override {
    expect_call("backward", stage, args.num_inputs, args.num_outputs, args.num_params);
    if (precision_of(args.grad_outputs[0].dtype, "grad output 0") == Precision::f32)
      run_backward<float>(static_cast<NormState&>(state), args);
    else
      run_backward<double>(static_cast<NormState&>(state), args);
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
    expect_hidden(args.inputs[0], dt, hidden_, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], dt, {batch, seq, hidden_}, "output 0");
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
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.grad_outputs[0], dt, hidden_, "grad output 0", batch, seq);
    expect_saved(st.saved, st.precision, precision_v<T>, st.batch, st.seq, batch, seq);
    const DLTensor& dx = args.grad_inputs[0];
    if (dx.data != nullptr) expect_tensor(dx, dt, {batch, seq, hidden_}, "grad input 0");
    expect_params(args.params, args.param_grads, dt);
    norm_.backward<T>(batch * seq, data<T>(args.grad_outputs[0]), st.xhat.data<T>(), st.rstd.data<T>(),
                      data<T>(args.params[0]), dx.data != nullptr ? data<T>(dx) : nullptr,
                      grad_or_null<T>(args.param_grads, 0),
                      norm_.rms ? nullptr : grad_or_null<T>(args.param_grads, 1));
  }

  int64_t hidden_ = 0;
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

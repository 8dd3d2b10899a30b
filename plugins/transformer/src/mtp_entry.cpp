// transformer.mtp_entry: where a multi-token-prediction depth begins (Megatron-LM's
// MultiTokenPredictionLayer up to its inner layer):
//   z = eh_proj([enorm(e); hnorm(h)])
// e: the embedding of the tokens rolled k places (input 0), h: depth k-1's hidden states after
// their final norm (input 1), both [batch, seq, hidden]; eh_proj: [hidden, 2 hidden] without a
// bias, the embedding's half first (Megatron's order). The norms are the model's (RMSNorm or
// LayerNorm). CPU only, float32 and float64.
#include <memory>

#include "common.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/gemm.hpp"

namespace plexus::transformer {
namespace {

namespace k = plexus::kernels;
using k::Trans;

class EntryState : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
  k::Buffer e_hat, h_hat, e_rstd, h_rstd;  // the two norms' normalized inputs and 1/rms
  k::Buffer joined;                        // [N, 2C]: enorm(e) then hnorm(h), eh_proj's input
};

class MtpEntry final : public LayerShell<MtpEntry, EntryState> {
  friend class LayerShell<MtpEntry, EntryState>;

 public:
  explicit MtpEntry(const plx_layer_create_args& args)
      : LayerShell("transformer.mtp_entry", args, 2, 1, PLX_LAYER_CONTEXT_PARALLEL) {
    const auto host = plexus::sdk::Host::current();
    hidden_ = positive_int(host, args.model_config, "hidden_size");
    norm_ = NormSpec::read(host, args.model_config, hidden_);
    const double std_dev = positive_number(host, args.model_config, "init_method_std");
    // The specs keep the names' pointers: literals, which live as long as the plugin.
    struct NormNames {
      const char *weight, *bias;
    };
    for (const NormNames norm :
         {NormNames{"enorm.weight", "enorm.bias"}, NormNames{"hnorm.weight", "hnorm.bias"}}) {
      params_.push_back(
          make_param(norm.weight, {hidden_}, PLX_INIT_ONES, 0, PLX_PARAM_NO_WEIGHT_DECAY | token_partial()));
      if (!norm_.rms)
        params_.push_back(
            make_param(norm.bias, {hidden_}, PLX_INIT_ZEROS, 0, PLX_PARAM_NO_WEIGHT_DECAY | token_partial()));
    }
    params_.push_back(
        make_param("eh_proj.weight", {hidden_, 2 * hidden_}, PLX_INIT_NORMAL, std_dev, token_partial()));
    if (on_cuda())
      throw Error(PLX_ERR_UNSUPPORTED,
                  "transformer.mtp_entry (multi-token prediction) runs on the CPU only; train MTP with "
                  "run.device = \"cpu\" or without MTP blocks");
  }

  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    expect_descs("output_desc", num_inputs, num_outputs);
    expect_hidden_desc(inputs[0], hidden_, "input 0 (embedding of the rolled tokens)");
    expect_hidden_desc(inputs[1], hidden_, "input 1 (hidden states of the depth before)");
    outputs[0] = inputs[1];
  }

  // ABI 1.10: both norms' normalized inputs and 1/rms, and eh_proj's input [N, 2C].
  double estimate_activation_bytes(uint32_t num_inputs, const plx_tensor_desc* inputs,
                                   const plx_activation_query& /*query*/) const override {
    expect_descs("estimate_activation_bytes", num_inputs, 1);
    expect_hidden_desc(inputs[0], hidden_, "input 0 (embedding of the rolled tokens)");
    refuse_estimate_on_device();
    const double rows = static_cast<double>(inputs[0].dims[0]) * static_cast<double>(inputs[0].dims[1]);
    return element_bytes(inputs[0]) * rows * static_cast<double>(4 * hidden_ + 2);
  }

  // eh_proj: 2 FLOPs per multiply-add of [N, 2C] x [2C, C]; backward twice that. Norms: none.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_descs("estimate_flops", num_inputs, 1);
    const double n = static_cast<double>(inputs[0].dims[0]) * static_cast<double>(inputs[0].dims[1]);
    forward = 2 * n * 2 * static_cast<double>(hidden_) * static_cast<double>(hidden_);
    backward = 2 * forward;
  }

 private:
  // The index of a norm's weight (and bias after it) among the parameters; eh_proj is last.
  uint32_t norm_param(uint32_t which) const { return which * norm_.num_params(); }
  uint32_t proj_param() const { return 2 * norm_.num_params(); }

  template <class T>
  void run_forward(EntryState& st, const plx_forward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.inputs[0], device_, dt, hidden_, "input 0 (embedding of the rolled tokens)", batch,
                  seq);
    expect_tensor(args.inputs[1], device_, dt, {batch, seq, hidden_},
                  "input 1 (hidden states of the depth before)");
    expect_tensor(args.outputs[0], device_, dt, {batch, seq, hidden_}, "output 0");
    expect_params(args.params, nullptr, dt);
    const int64_t rows = batch * seq, c = hidden_;
    st.saved = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.precision = precision_v<T>;
    st.batch = batch;
    st.seq = seq;
    const auto count = static_cast<std::size_t>(rows * c);
    T* joined = st.joined.get<T>(2 * count);
    k::Buffer scratch;
    T* y = scratch.get<T>(count);
    for (uint32_t which = 0; which < 2; ++which) {
      const uint32_t p = norm_param(which);
      T* hat = st.saved ? (which == 0 ? st.e_hat : st.h_hat).template get<T>(count) : nullptr;
      T* rstd = st.saved
                    ? (which == 0 ? st.e_rstd : st.h_rstd).template get<T>(static_cast<std::size_t>(rows))
                    : nullptr;
      norm_.forward<T>(rows, data<T>(args.inputs[which]), data<T>(args.params[p]),
                       norm_.rms ? nullptr : data<T>(args.params[p + 1]), y, hat, rstd);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < c; ++j) joined[r * 2 * c + which * c + j] = y[r * c + j];
    }
    k::gemm_parallel<T>(Trans::N, Trans::T, rows, c, 2 * c, T(1), joined, 2 * c,
                        data<T>(args.params[proj_param()]), 2 * c, T(0), data<T>(args.outputs[0]), c);
  }

  template <class T>
  void run_backward(EntryState& st, const plx_backward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.grad_outputs[0], device_, dt, hidden_, "grad output 0", batch, seq);
    expect_saved(st.saved, st.precision, precision_v<T>, st.batch, st.seq, batch, seq);
    expect_params(args.params, args.param_grads, dt);
    const int64_t rows = batch * seq, c = hidden_;
    const auto count = static_cast<std::size_t>(rows * c);
    const T* dz = data<T>(args.grad_outputs[0]);
    const T* w = data<T>(args.params[proj_param()]);
    // z = joined W^T:  d joined = dz W,  dW += dz^T joined.
    if (T* dw = grad_or_null<T>(args.param_grads, proj_param()))
      k::gemm_parallel<T>(Trans::T, Trans::N, c, 2 * c, rows, T(1), dz, c, st.joined.data<T>(), 2 * c, T(1),
                          dw, 2 * c);
    k::Buffer d_joined_buffer, dy_buffer;
    T* d_joined = d_joined_buffer.get<T>(2 * count);
    k::gemm_parallel<T>(Trans::N, Trans::N, rows, 2 * c, c, T(1), dz, c, w, 2 * c, T(0), d_joined, 2 * c);
    T* dy = dy_buffer.get<T>(count);
    for (uint32_t which = 0; which < 2; ++which) {
      const DLTensor& dx_t = args.grad_inputs[which];
      const uint32_t p = norm_param(which);
      T* dx = nullptr;
      if (dx_t.data != nullptr) {
        expect_tensor(dx_t, device_, dt, {batch, seq, c}, "grad input " + std::to_string(which));
        dx = data<T>(dx_t);
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < c; ++j) dy[r * c + j] = d_joined[r * 2 * c + which * c + j];
      const k::Buffer& hat = which == 0 ? st.e_hat : st.h_hat;
      const k::Buffer& rstd = which == 0 ? st.e_rstd : st.h_rstd;
      norm_.backward<T>(rows, dy, hat.data<T>(), rstd.data<T>(), data<T>(args.params[p]), dx,
                        grad_or_null<T>(args.param_grads, p),
                        norm_.rms ? nullptr : grad_or_null<T>(args.param_grads, p + 1));
    }
  }

  int64_t hidden_ = 0;
  NormSpec norm_;
};

}  // namespace

const plx_component_desc* mtp_entry_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<MtpEntry>(
      "transformer.mtp_entry",
      "multi-token prediction: z = eh_proj([enorm(embedding of the rolled tokens); hnorm(hidden states)])",
      kEmptySchema);
  return &desc;
}

}  // namespace plexus::transformer

// vision.projection: Megatron-LM's MultimodalProjector with projector_type "mlp", the encoder's
// last unit, mapping its hidden states to the language model's width:
//   a = x W1^T + b1,  h = gelu(a),  y = h W2^T + b2
// x [B, P, hidden_size], W1 = encoder.linear_fc1.weight [ffn, hidden_size], W2 =
// encoder.linear_fc2.weight [output_size, ffn]; gelu exact (erf), as torch.nn.functional.gelu.
// No loss, no pre-norm, no residual. CPU only, float32 and float64.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common.hpp"
#include "plexus_kernels/activation.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/gemm.hpp"

namespace plexus::vision {
namespace {

namespace k = plexus::kernels;
using k::Trans;

constexpr const char* kComponent = "vision.projection";

constexpr const char* kSchema = R"json({"type": "object",
  "doc": "Megatron-LM's MultimodalProjector, projector_type mlp: y = fc2(gelu(fc1(x))), both linears with a bias.",
  "properties": {
    "output_size": {"type": "integer", "minimum": 1,
      "doc": "the output width: the language model's hidden size (Megatron's projector output)"},
    "ffn_hidden_size": {"type": "integer", "minimum": 0, "default": 0,
      "doc": "the width between the two linears; 0 means output_size"},
    "activation": {"type": "string", "enum": ["gelu"], "default": "gelu",
      "doc": "the activation between the linears: gelu, exact (erf), as torch.nn.functional.gelu"}},
  "required": ["output_size"]})json";

class ProjectionState : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
  k::Buffer x;  // the input [N, hidden]: fc1's weight gradient
  k::Buffer a;  // fc1's output [N, ffn]: gelu's derivative
  k::Buffer h;  // gelu(a) [N, ffn]: fc2's weight gradient
};

class Projection final : public VisionLayer {
 public:
  explicit Projection(const plx_layer_create_args& args) : VisionLayer(kComponent, args, 1) {
    const auto host = plexus::sdk::Host::current();
    const plx_config o = args.config;
    // Required: the schema says so to the engine; a caller that creates the layer without
    // validating its options gets the same refusal here.
    const auto out = o == nullptr ? std::nullopt : host.config_int_if(o, "output_size");
    if (!out)
      refuse(
          "option output_size is required: the projection's output width, the language model's hidden size "
          "(e.g. {\"output_size\": 4096})");
    output_size_ = option_int(host, o, "output_size", 0, 1, kComponent);
    const int64_t ffn = option_int(host, o, "ffn_hidden_size", 0, 0, kComponent);
    ffn_ = ffn == 0 ? output_size_ : ffn;
    const std::string activation =
        o == nullptr ? std::string("gelu") : host.config_string_if(o, "activation").value_or("gelu");
    if (activation != "gelu")
      refuse("option activation must be \"gelu\" (the only one built), got \"" + activation + "\"");
    // Megatron's names: the projector keeps its MLP as .encoder. Weights normal(init_method_std)
    // (fc2 unscaled: the projector is not in a residual stream), biases zero and not decayed.
    params_.push_back(
        make_param("encoder.linear_fc1.weight", {ffn_, hidden_}, PLX_INIT_NORMAL, init_std_, 0));
    params_.push_back(
        make_param("encoder.linear_fc1.bias", {ffn_}, PLX_INIT_ZEROS, 0, PLX_PARAM_NO_WEIGHT_DECAY));
    params_.push_back(
        make_param("encoder.linear_fc2.weight", {output_size_, ffn_}, PLX_INIT_NORMAL, init_std_, 0));
    params_.push_back(
        make_param("encoder.linear_fc2.bias", {output_size_}, PLX_INIT_ZEROS, 0, PLX_PARAM_NO_WEIGHT_DECAY));
  }

  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    expect_descs(num_inputs, num_outputs);
    const plx_tensor_desc& d = inputs[0];
    precision_of(d.dtype, kComponent, "input 0 (hidden states)");
    expect_width(d.dims, d.ndim);
    plx_tensor_desc y{};
    y.ndim = 3;
    y.dtype = d.dtype;
    y.dims[0] = d.dims[0];
    y.dims[1] = d.dims[1];
    y.dims[2] = output_size_;
    outputs[0] = y;
  }

  // Two products, fc1 ([N, hidden] x [hidden, ffn]) and fc2 ([N, ffn] x [ffn, output_size]), 2
  // FLOPs per multiply-add; backward (input and weight gradients): twice the forward.
  void estimate_flops(uint32_t num_inputs, const plx_tensor_desc* inputs, double& forward,
                      double& backward) const override {
    expect_descs(num_inputs, 1);
    expect_width(inputs[0].dims, inputs[0].ndim);
    const double n = static_cast<double>(inputs[0].dims[0]) * static_cast<double>(inputs[0].dims[1]);
    forward = 2 * n * static_cast<double>(ffn_) * static_cast<double>(hidden_ + output_size_);
    backward = 2 * forward;
  }

  std::unique_ptr<plexus::sdk::LayerState> create_state(uint32_t) override {
    return std::make_unique<ProjectionState>();
  }

  void forward(plexus::sdk::LayerState& state, uint32_t stage, const plx_forward_args& args) override {
    expect_call(stage, args.num_inputs, args.num_outputs, args.num_params);
    auto& st = static_cast<ProjectionState&>(state);
    if (precision_of(args.inputs[0].dtype, kComponent, "input 0 (hidden states)") == Precision::f32)
      run_forward<float>(st, args);
    else
      run_forward<double>(st, args);
  }

  void backward(plexus::sdk::LayerState& state, uint32_t stage, const plx_backward_args& args) override {
    expect_call(stage, args.num_inputs, args.num_outputs, args.num_params);
    auto& st = static_cast<ProjectionState&>(state);
    if (precision_of(args.grad_outputs[0].dtype, kComponent, "grad output 0") == Precision::f32)
      run_backward<float>(st, args);
    else
      run_backward<double>(st, args);
  }

 private:
  static std::size_t sz(int64_t v) { return static_cast<std::size_t>(v); }

  // [batch, seq, hidden_size]: the encoder's width.
  void expect_width(const int64_t* dims, int64_t ndim) const {
    if (ndim != 3 || dims[2] != hidden_)
      refuse("input 0 (hidden states): expected shape [batch, patches, " + std::to_string(hidden_) +
             "] (model.hidden_size " + std::to_string(hidden_) + ", the encoder's width), got " +
             shape_text(dims, ndim));
  }

  // rows[r, :] += bias for every row.
  template <class T>
  static void add_bias(int64_t rows, int64_t cols, const T* bias, T* y) {
    for (int64_t r = 0; r < rows; ++r) {
      T* row = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
    }
  }
  // db += the sum of the rows of d, in row order.
  template <class T>
  static void sum_rows(int64_t rows, int64_t cols, const T* d, T* db) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = d + r * cols;
      for (int64_t c = 0; c < cols; ++c) db[c] += row[c];
    }
  }

  template <class T>
  void run_forward(ProjectionState& st, const plx_forward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    const DLTensor& in = args.inputs[0];
    plexus::sdk::expect_dense(in, device_, dt, std::string(kComponent) + ": input 0 (hidden states)");
    expect_width(in.shape, in.ndim);
    const int64_t batch = in.shape[0], seq = in.shape[1], n = batch * seq;
    expect_tensor(args.outputs[0], device_, dt, {batch, seq, output_size_},
                  std::string(kComponent) + ": output 0");
    expect_params(args.params, nullptr, dt);
    const bool train = (args.flags & PLX_FORWARD_TRAINING) != 0;
    const T* x = data<T>(in);
    const T* w1 = data<T>(args.params[0]);
    const T* b1 = data<T>(args.params[1]);
    const T* w2 = data<T>(args.params[2]);
    const T* b2 = data<T>(args.params[3]);
    T* y = data<T>(args.outputs[0]);

    // A forward that does not train keeps nothing: a and h live in the call's buffers.
    k::Buffer call_a, call_h;
    T* a = (train ? st.a : call_a).get<T>(sz(n * ffn_));
    T* h = (train ? st.h : call_h).get<T>(sz(n * ffn_));
    k::gemm_parallel<T>(Trans::N, Trans::T, n, ffn_, hidden_, T(1), x, hidden_, w1, hidden_, T(0), a, ffn_);
    add_bias<T>(n, ffn_, b1, a);
    k::gelu_forward<T>(n * ffn_, a, h);
    k::gemm_parallel<T>(Trans::N, Trans::T, n, output_size_, ffn_, T(1), h, ffn_, w2, ffn_, T(0), y,
                        output_size_);
    add_bias<T>(n, output_size_, b2, y);

    st.saved = train;
    st.precision = precision_v<T>;
    st.batch = batch;
    st.seq = seq;
    if (train) {
      std::copy(x, x + n * hidden_, st.x.get<T>(sz(n * hidden_)));
    } else {
      st.x.release();
      st.a.release();
      st.h.release();
    }
  }

  template <class T>
  void run_backward(ProjectionState& st, const plx_backward_args& args) {
    const DLDataType dt = dtype_of(precision_v<T>);
    const DLTensor& gy = args.grad_outputs[0];
    plexus::sdk::expect_dense(gy, device_, dt, std::string(kComponent) + ": grad output 0");
    if (gy.ndim != 3 || gy.shape[2] != output_size_)
      refuse("grad output 0: expected shape [batch, patches, " + std::to_string(output_size_) +
             "] (option output_size), got " + shape_text(gy));
    const int64_t batch = gy.shape[0], seq = gy.shape[1], n = batch * seq;
    expect_saved(st.saved, st.precision, precision_v<T>, st.batch, st.seq, batch, seq);
    expect_params(args.params, args.param_grads, dt);
    const DLTensor& gx = args.grad_inputs[0];
    if (gx.data != nullptr)
      expect_tensor(gx, device_, dt, {batch, seq, hidden_}, std::string(kComponent) + ": grad input 0");
    const T* dy = data<T>(gy);
    const T* x = st.x.data<T>();
    const T* a = st.a.data<T>();
    const T* h = st.h.data<T>();
    const T* w1 = data<T>(args.params[0]);
    const T* w2 = data<T>(args.params[2]);

    // y = h W2^T + b2:  dW2 += dy^T h,  db2 += sum dy,  dh = dy W2.
    if (T* dw2 = grad_or_null<T>(args.param_grads, 2))
      k::gemm_parallel<T>(Trans::T, Trans::N, output_size_, ffn_, n, T(1), dy, output_size_, h, ffn_, T(1),
                          dw2, ffn_);
    if (T* db2 = grad_or_null<T>(args.param_grads, 3)) sum_rows<T>(n, output_size_, dy, db2);
    k::Buffer da_buf;
    T* da = da_buf.get<T>(sz(n * ffn_));
    k::gemm_parallel<T>(Trans::N, Trans::N, n, ffn_, output_size_, T(1), dy, output_size_, w2, ffn_, T(0), da,
                        ffn_);
    // h = gelu(a):  da = gelu'(a) dh (in place).
    k::gelu_backward<T>(n * ffn_, a, da, da);
    // a = x W1^T + b1:  dW1 += da^T x,  db1 += sum da,  dx = da W1 (written).
    if (T* dw1 = grad_or_null<T>(args.param_grads, 0))
      k::gemm_parallel<T>(Trans::T, Trans::N, ffn_, hidden_, n, T(1), da, ffn_, x, hidden_, T(1), dw1,
                          hidden_);
    if (T* db1 = grad_or_null<T>(args.param_grads, 1)) sum_rows<T>(n, ffn_, da, db1);
    if (gx.data != nullptr)
      k::gemm_parallel<T>(Trans::N, Trans::N, n, hidden_, ffn_, T(1), da, ffn_, w1, hidden_, T(0),
                          data<T>(gx), hidden_);
  }

  int64_t output_size_ = 0, ffn_ = 0;
};

}  // namespace

const plx_component_desc* projection_component() {
  static const plx_component_desc desc = plexus::sdk::layer_component<Projection>(
      kComponent,
      "multimodal projector (Megatron's MultimodalProjector, mlp): y = fc2(gelu(fc1(x))) to the language "
      "model's width",
      kSchema);
  return &desc;
}

}  // namespace plexus::vision

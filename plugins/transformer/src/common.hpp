// Shared by the transformer layers: reading the model config, checking tensors, dtype dispatch,
// the pre-norm (RMSNorm or LayerNorm) and a base class with the checks every layer makes and the
// choice between the CPU and the device (CUDA) implementation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "device_impl.hpp"
#include "plexus/cpp/group.hpp"
#include "plexus/cpp/host.hpp"
#include "plexus/cpp/layer.hpp"
#include "plexus/cpp/tensor.hpp"
#include "plexus/plugin.h"

namespace plexus::transformer {

using plexus::sdk::Error;

// ---- the model section (args.model_config) ----

// Reads an integer key that must be >= 1; the error names the key and the value.
int64_t positive_int(const plexus::sdk::Host& host, plx_config model, const char* key);
// The rows of the embedding and output layer: model_config.padded_vocab_size (the host pads
// vocab_size to a multiple of make_vocab_size_divisible_by x tp, ABI 1.8), else vocab_size.
int64_t padded_vocab_size(const plexus::sdk::Host& host, plx_config model);
// Reads a number that must be > 0.
double positive_number(const plexus::sdk::Host& host, plx_config model, const char* key);

// model.position_embedding_type (Megatron's --position-embedding-type; absent: rope, for hosts
// that predate it): rotary embeddings in attention, none, or learned absolute positions added by
// the embedding. Anything else is refused naming the key.
enum class PositionEmbedding { rope, none, learned_absolute };
PositionEmbedding position_embedding(const plexus::sdk::Host& host, plx_config model);

// The std of output projections (attention's linear_proj, the MLP's linear_fc2): Megatron's
// output_layer_init_method, init_method_std / sqrt(2 num_layers) for a GPT and
// init_method_std / sqrt(num_layers) for a hybrid model, whose num_layers counts every physical
// layer. Either way: over the square root of the number of layers that add to the residual
// stream, which the create args carry (plx_layer_residual_layers).
double output_init_std(const plx_layer_create_args& args, double init_method_std);

struct NormSpec {
  bool rms = true;    // RMSNorm, else LayerNorm (with a bias)
  double eps = 1e-5;  // layernorm_epsilon
  int64_t cols = 0;   // hidden_size

  static NormSpec read(const plexus::sdk::Host& host, plx_config model, int64_t hidden);
  uint32_t num_params() const { return rms ? 1u : 2u; }

  // rows x cols. b is ignored for RMSNorm. xhat and rstd may be null (no backward follows).
  template <class T>
  void forward(int64_t rows, const T* x, const T* w, const T* b, T* y, T* xhat, T* rstd) const;
  // dx written (may be null), dw/db accumulated (may be null).
  template <class T>
  void backward(int64_t rows, const T* dy, const T* xhat, const T* rstd, const T* w, T* dx, T* dw,
                T* db) const;
  // y = xhat * w (+ b): a norm's output again from what forward kept.
  template <class T>
  void apply(int64_t rows, const T* xhat, const T* w, const T* b, T* y) const;
};

// ---- tensor parallelism ----

// `whole` divided over the tp group, or an Error naming the model key, its value and the group.
int64_t split_over(const plexus::sdk::Group& tp, int64_t whole, const char* key);
// Marks a parameter spec as this rank's shard of a tensor split over tp along `dim` (ABI 1.8), of
// the whole parts `parts` along it (a vector that outlives the spec; empty: one part).
void mark_split(plx_param_spec& spec, int32_t dim, const std::vector<int64_t>& parts);

// ---- tensors ----

// Shapes in messages, devices, and the tensor checks: the SDK's (plexus/cpp/tensor.hpp).
using plexus::sdk::device_text;
using plexus::sdk::expect_tensor;
using plexus::sdk::shape_text;

enum class Precision { f32, f64 };
inline DLDataType dtype_of(Precision p) {
  return p == Precision::f32 ? plx_dtype_f32() : plx_dtype_f64();
}

// The floating precision of a dtype; throws naming `what` for anything but float32 / float64.
Precision precision_of(DLDataType dtype, const std::string& what);

// A float32, float64 or bfloat16 description of shape [batch, seq, hidden], or an Error naming
// `what` (bfloat16: for the CUDA path; the CPU's forward refuses it).
void expect_hidden_desc(const plx_tensor_desc& d, int64_t hidden, const std::string& what);
// [B, S, C] hidden states on `device` with C == hidden: returns B and S.
void expect_hidden(const DLTensor& t, DLDevice device, DLDataType dtype, int64_t hidden,
                   const std::string& what, int64_t& batch, int64_t& seq);
// Every parameter (and, when grads is not null, every gradient whose data is not null) against
// its spec's shape, in dtype `dtype`, on `device`.
void expect_params(const std::vector<plx_param_spec>& specs, const DLTensor* params, const DLTensor* grads,
                   DLDataType dtype, DLDevice device);

// The refusals of out-of-range token ids and targets, shared by the CPU and CUDA paths so both
// name the value, its [batch, seq] position and vocab_size the same way.
[[noreturn]] void throw_invalid_token(int32_t id, int64_t index, int64_t seq, int64_t vocab);
[[noreturn]] void throw_invalid_target(int32_t target, int64_t index, int64_t seq, int64_t vocab);

template <class T>
constexpr Precision precision_v = sizeof(T) == 4 ? Precision::f32 : Precision::f64;

template <class T>
T* data(const DLTensor& t) {
  return static_cast<T*>(plx_data(&t));
}

// ---- the base of every layer ----

class TransformerLayer : public plexus::sdk::Layer {
 public:
  TransformerLayer(const char* component, const plx_layer_create_args& args);

  plx_param_spec param(uint32_t index) const override;
  plx_stage_info stage(uint32_t index) const override;

 protected:
  bool on_cuda() const { return device_.device_type == kDLCUDA; }
  // A layer that splits its parameters over tp refuses to on CUDA, whose kernels are whole-layer.
  void refuse_split_on_device() const;
  // The activation estimates (ABI 1.10) count the CPU path's saved buffers; the CUDA path's
  // states keep others, so a layer on a GPU answers "unknown".
  void refuse_estimate_on_device() const;
  // Bytes per element of a tensor description's dtype.
  static double element_bytes(const plx_tensor_desc& d) {
    return static_cast<double>(d.dtype.bits) / 8.0 * static_cast<double>(d.dtype.lanes);
  }
  // The parts of every device implementation's spec this base knows.
  void fill_spec(LayerSpec& spec) const;

  // Checks the stage and the counts of a forward / backward call; `inputs`/`outputs` as in info().
  void expect_call(const char* what, uint32_t stage, uint32_t num_inputs, uint32_t num_outputs,
                   uint32_t num_params) const;
  void expect_descs(const char* what, uint32_t num_inputs, uint32_t num_outputs) const;
  // Checks every parameter (and, when grads is not null, every gradient whose data is not null)
  // against its spec's shape, in dtype `dtype`.
  void expect_params(const DLTensor* params, const DLTensor* grads, DLDataType dtype) const;
  // The gradient of parameter i, or null when the caller needs none.
  template <class T>
  static T* grad_or_null(const DLTensor* grads, uint32_t i) {
    return grads != nullptr && grads[i].data != nullptr ? data<T>(grads[i]) : nullptr;
  }

  const char* component_;
  DLDevice device_;
  plexus::sdk::Group tp_;  // the host's "tp" group (one rank without tensor parallelism)
  // Sequence parallelism (model_config.sequence_parallel, which the host sets only with a tp group
  // of 2 or more): the hidden states in and out are this rank's block of the microbatch's tokens.
  bool sp_ = false;
  // The flags of a whole parameter that runs on this rank's tokens: its gradient is a part.
  uint32_t token_partial() const { return sp_ ? uint32_t{PLX_PARAM_SEQUENCE_PARALLEL} : 0u; }
  std::vector<plx_param_spec> params_;
  // Set by a layer created on a CUDA device (from src/cuda/): then it runs every forward and
  // backward and owns the states; null on the CPU.
  std::unique_ptr<DeviceImpl> device_impl_;
};

// The shell every layer shares: info(), create_state() and the dispatch of forward and backward:
// to the device implementation when the layer has one, else to the CPU path in float32 or
// float64. Derived (CRTP) provides, for the CPU,
//   template <class T> void run_forward(State&, const plx_forward_args&);
//   template <class T> void run_backward(State&, const plx_backward_args&);
// and may hide forward_precision / backward_precision to pick the tensor that decides the
// precision (by default input 0 and grad output 0).
template <class Derived, class State>
class LayerShell : public TransformerLayer {
 public:
  LayerShell(const char* component, const plx_layer_create_args& args, uint32_t num_inputs,
             uint32_t num_outputs, uint32_t flags = 0)
      : TransformerLayer(component, args),
        num_inputs_(num_inputs),
        num_outputs_(num_outputs),
        flags_(flags) {}

  plx_layer_info info() const override {
    plx_layer_info i{};
    i.struct_size = sizeof(i);
    i.flags = flags_;
    i.num_params = static_cast<uint32_t>(params_.size());
    i.num_stages = 1;
    i.num_inputs = num_inputs_;
    i.num_outputs = num_outputs_;
    return i;
  }

  std::unique_ptr<plexus::sdk::LayerState> create_state(uint32_t) override {
    if (device_impl_) return device_impl_->create_state();
    return std::make_unique<State>();
  }

  void forward(plexus::sdk::LayerState& state, uint32_t stage, const plx_forward_args& args) override {
    expect_call("forward", stage, args.num_inputs, args.num_outputs, args.num_params);
    if (device_impl_) return device_impl_->forward(state, args);
    auto& self = static_cast<Derived&>(*this);
    auto& st = static_cast<State&>(state);
    if (self.forward_precision(args) == Precision::f32)
      self.template run_forward<float>(st, args);
    else
      self.template run_forward<double>(st, args);
  }

  void backward(plexus::sdk::LayerState& state, uint32_t stage, const plx_backward_args& args) override {
    expect_call("backward", stage, args.num_inputs, args.num_outputs, args.num_params);
    if (device_impl_) return device_impl_->backward(state, args);
    auto& self = static_cast<Derived&>(*this);
    auto& st = static_cast<State&>(state);
    if (self.backward_precision(st, args) == Precision::f32)
      self.template run_backward<float>(st, args);
    else
      self.template run_backward<double>(st, args);
  }

  Precision forward_precision(const plx_forward_args& args) const {
    return precision_of(args.inputs[0].dtype, "input 0 (hidden states)");
  }
  Precision backward_precision(const State&, const plx_backward_args& args) const {
    return precision_of(args.grad_outputs[0].dtype, "grad output 0");
  }

 private:
  uint32_t num_inputs_, num_outputs_, flags_;
};

// The sublayers of the residual stream (attention, MLP) and the final norm: hidden states
// [batch, seq, hidden_size] in, the same shape and dtype out.
template <class Derived, class State>
class HiddenLayer : public LayerShell<Derived, State> {
 public:
  HiddenLayer(const char* component, const plx_layer_create_args& args)
      : LayerShell<Derived, State>(component, args, 1, 1, PLX_LAYER_CONTEXT_PARALLEL),
        hidden_(positive_int(plexus::sdk::Host::current(), args.model_config, "hidden_size")) {}

  void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs, uint32_t num_outputs,
                   plx_tensor_desc* outputs) const override {
    this->expect_descs("output_desc", num_inputs, num_outputs);
    expect_hidden_desc(inputs[0]);
    outputs[0] = inputs[0];
  }

 protected:
  void expect_hidden_desc(const plx_tensor_desc& d) const {
    transformer::expect_hidden_desc(d, hidden_, "input 0 (hidden states)");
  }

  // What every backward of a hidden layer checks first: the upstream gradient's shape, that a
  // training forward of this precision and size was saved, the input gradient (when wanted) and
  // the parameters. Returns the sizes and the two activation-gradient pointers (dx may be null).
  template <class T>
  struct BackwardIo {
    int64_t batch = 0, seq = 0;
    const T* dy = nullptr;
    T* dx = nullptr;
  };
  template <class T>
  BackwardIo<T> expect_backward(const State& st, const plx_backward_args& args) const {
    const DLDataType dt = dtype_of(precision_v<T>);
    BackwardIo<T> io;
    expect_hidden(args.grad_outputs[0], this->device_, dt, hidden_, "grad output 0", io.batch, io.seq);
    expect_saved(st.saved, st.precision, precision_v<T>, st.batch, st.seq, io.batch, io.seq);
    const DLTensor& dx = args.grad_inputs[0];
    if (dx.data != nullptr) {
      expect_tensor(dx, this->device_, dt, {io.batch, io.seq, hidden_}, "grad input 0");
      io.dx = data<T>(dx);
    }
    this->expect_params(args.params, args.param_grads, dt);
    io.dy = data<T>(args.grad_outputs[0]);
    return io;
  }

  int64_t hidden_;
};

// A parameter spec (fp32 master dtype, like plexus::sdk::param_spec) with dims from a vector.
plx_param_spec make_param(const char* name, std::initializer_list<int64_t> dims, uint32_t init,
                          double std_dev, uint32_t flags);

// Throws unless the state holds a training forward with this precision and these sizes.
void expect_saved(bool saved, Precision saved_precision, Precision precision, int64_t saved_batch,
                  int64_t saved_seq, int64_t batch, int64_t seq);

// ---- the components ----
const plx_component_desc* embedding_component();
const plx_component_desc* attention_component();
const plx_component_desc* mlp_component();
const plx_component_desc* norm_component();
const plx_component_desc* lm_head_component();
const plx_component_desc* mtp_entry_component();

// Every component's config section is an empty object: all settings come from the model section.
inline constexpr const char* kEmptySchema = R"({"type": "object", "properties": {}})";

}  // namespace plexus::transformer

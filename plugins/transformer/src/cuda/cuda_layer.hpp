// The shell every CUDA layer implementation shares: its spec and Context, its state type, the
// scope of each call, the activation types (float32 or bfloat16) and the checks the CUDA path adds
// to the CPU's (the activation dtype; the saved forward; a hidden layer's backward tensors).
//
// Activations (hidden states, their gradients, what a state keeps of them) are float32 or
// bfloat16; parameters and their gradients are float32 always (the engine's master weights), and
// so are the norms' 1/std. The shell (CudaLayer) picks the activation type T (float or
// ck::bfloat16) from the call's dtype and runs the layer's one body templated on T.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "common.hpp"
#include "device_impl.hpp"
#include "layer_specs.hpp"
#include "plexus_cuda_kernels/elementwise.hpp"
#include "plexus_cuda_kernels/types.hpp"
#include "plexus_cuda_layer/arena.hpp"
#include "plexus_cuda_layer/context.hpp"
#include "plexus_cuda_layer/read_back.hpp"

namespace plexus::transformer::cuda {

namespace ck = plexus::cuda_kernels;
// The per-layer handle and call scope, the state's device memory and read_back are shared with
// the other plugins' CUDA layers (plugins/common/cuda_layer).
using plexus::cuda_layer::Arena;
using plexus::cuda_layer::Context;
using plexus::cuda_layer::read_back;

// ---- activation types ----

enum class Act { f32, bf16 };

template <class T>
constexpr Act act_v = std::is_same_v<T, ck::bfloat16> ? Act::bf16 : Act::f32;

DLDataType dtype_of(Act act);
const char* act_name(Act act);  // "float32", "bfloat16"

// The activation type of a dtype on a CUDA device: float32 or bfloat16; anything else is refused
// naming `what` and the dtype given.
Act act_of(DLDataType dtype, const std::string& what);

template <class T>
DLDataType dtype_v() {
  return dtype_of(act_v<T>);
}

// ---- state ----

// What a forward recorded for its backward.
struct ForwardRecord {
  bool saved = false;  // a training forward kept its state
  Act act = Act::f32;  // the activation type it ran in, and kept its tensors in
  int64_t batch = 0, seq = 0;
  // The CPU path's refusal (expect_saved) of a backward without a matching training forward,
  // plus one in another activation type than the forward's (its kept tensors are in that type).
  void expect(int64_t batch, int64_t seq, Act act) const;
};

// A pointer into a state's memory whose element type is the forward's activation type: the state
// is not a template, and backward reads it as T only after ForwardRecord::expect checked that the
// forward ran in T. Read-only: the forward that fills it writes through its own typed pointer.
class Kept {
 public:
  // Implicit, so a layer writes `st.xhat = xhat` or `st.xhat = nullptr`.
  Kept() = default;
  Kept(std::nullptr_t) noexcept {}
  template <class T>
  Kept(const T* p) noexcept : ptr_(p) {}
  template <class T>
  const T* get() const noexcept {
    return static_cast<const T*>(ptr_);
  }

 private:
  const void* ptr_ = nullptr;
};

// The per-microbatch state of a CUDA layer: the record and the device memory it keeps.
struct CudaState : plexus::sdk::LayerState {
  explicit CudaState(DLDevice device) : memory(device) {}
  ForwardRecord record;
  Arena memory;
};

// ---- fp32 arrays as operands of products with T activations ----

// For T = float the fp32 array itself (the products are fp32 x fp32, as they always were). For
// bfloat16 a bf16 copy of its n elements (rounded to nearest even) in `arena`, so the product is
// bf16 x bf16 with fp32 accumulation (gemm<bfloat16, ...>); the fp32 original is left as it is.
// For the weights (whose masters stay fp32) and the head's fp32 logit gradient.
template <class T>
const T* operand_as(const float* x, int64_t n, [[maybe_unused]] Arena& arena,
                    [[maybe_unused]] cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    (void)n;
    return x;
  } else {
    T* copy = arena.take<T>(static_cast<std::size_t>(n), stream);
    ck::convert(n, x, copy, stream);
    return copy;
  }
}

// In a backward: the weight operand its training forward prepared with operand_as and kept (in
// the state's memory), so bf16 weights are not converted again. For T = float it is this call's
// fp32 weight (nothing was kept).
template <class T>
const T* kept_weight(const Kept& copy, const float* w) {
  if constexpr (std::is_same_v<T, float>)
    return w;
  else
    return copy.get<T>();
}

// A backward of attention, MLP or the final norm in activation type T: grad output 0
// [B, S, hidden] in T on the device, a matching training forward (in T), grad input 0 (when
// wanted, in T) and the fp32 parameters and their gradients, checked in the CPU path's order with
// its messages.
template <class T>
struct HiddenGrads {
  int64_t batch = 0, seq = 0;
  const T* dy = nullptr;
  T* dx = nullptr;  // null: no input gradient wanted
};
template <class T>
HiddenGrads<T> expect_hidden_backward(const LayerSpec& spec, int64_t hidden, const ForwardRecord& record,
                                      const plx_backward_args& args);

// The parameters (and, when grads is not null, their gradients whose data is not null) against
// their specs: float32 whatever the activation type (a parameter of another dtype is refused
// naming it, before the CPU path's checks of devices and shapes).
void expect_params_f32(const LayerSpec& spec, const DLTensor* params, const DLTensor* grads);

// The gradient of parameter i, or null when the caller needs none.
inline float* grad_or_null(const DLTensor* grads, uint32_t i) {
  return grads != nullptr && grads[i].data != nullptr ? data<float>(grads[i]) : nullptr;
}

// The shell of every CUDA layer (CRTP): Derived implements
//   template <class T> void run_forward(State&, const plx_forward_args&, Context::Scope&);
//   template <class T> void run_backward(State&, const plx_backward_args&, Context::Scope&);
// for T = float and ck::bfloat16, and the shell calls the one of the call's activation type:
// forward_act / backward_act below, which a Derived may hide with its own (the embedding's comes
// from its output, the head's backward from its input gradient). State derives from CudaState.
template <class Derived, class Spec, class State>
class CudaLayer : public DeviceImpl {
 public:
  explicit CudaLayer(const Spec& spec) : spec_(spec), context_(spec.component, spec.device) {}

  std::unique_ptr<plexus::sdk::LayerState> create_state() final {
    return std::make_unique<State>(spec_.device);
  }

  void forward(plexus::sdk::LayerState& state, const plx_forward_args& args) final {
    Context::Scope scope(context_, args.compute_stream);
    auto& st = static_cast<State&>(state);
    auto& self = static_cast<Derived&>(*this);
    if (self.forward_act(args) == Act::bf16)
      self.template run_forward<ck::bfloat16>(st, args, scope);
    else
      self.template run_forward<float>(st, args, scope);
  }

  void backward(plexus::sdk::LayerState& state, const plx_backward_args& args) final {
    Context::Scope scope(context_, args.compute_stream);
    auto& st = static_cast<State&>(state);
    st.memory.used_on(scope.stream());
    auto& self = static_cast<Derived&>(*this);
    if (self.backward_act(st, args) == Act::bf16)
      self.template run_backward<ck::bfloat16>(st, args, scope);
    else
      self.template run_backward<float>(st, args, scope);
  }

 protected:
  // A hidden layer's activation type: its input's in forward, its upstream gradient's in backward.
  static Act forward_act(const plx_forward_args& args) {
    return act_of(args.inputs[0].dtype, "input 0 (hidden states)");
  }
  static Act backward_act(const State&, const plx_backward_args& args) {
    return act_of(args.grad_outputs[0].dtype, "grad output 0");
  }

  DLDevice device() const noexcept { return spec_.device; }
  void expect_params(const DLTensor* params, const DLTensor* grads) const {
    expect_params_f32(spec_, params, grads);
  }
  // After a forward's checks passed: drops what an earlier forward on this state kept, and
  // records this one (run in activation type `act`).
  static void start_forward(State& st, const plx_forward_args& args, int64_t batch, int64_t seq, Act act) {
    st.memory.release();
    st.record.saved = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.record.act = act;
    st.record.batch = batch;
    st.record.seq = seq;
  }

  Spec spec_;
  Context context_;
};

}  // namespace plexus::transformer::cuda

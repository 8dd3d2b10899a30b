// Attention and MLP on a CUDA device, as ../prenorm_layer.hpp on the CPU: both are
// f = out(core(in(norm(x)))), so PreNormCudaLayer runs a whole forward and backward but the core,
// with the calls each layer made on its own (the same products, norms and allocations, in the
// same order). Spec (a PreNormSpec, ../layer_specs.hpp) says where the projections are; Derived
// (CRTP) provides the core:
//   template <class T> T* core_forward(State&, Context::Scope&, Arena& keep, const Tokens&,
//                                      bool train, T* in);  // returns mid, taken from keep
//   template <class T> const T* core_backward(const State&, Context::Scope&, Arena& temp,
//                                             const Tokens&, T* d_mid);  // returns d_in
// and may hide expect_sequence (the sequence lengths it refuses). Products with T activations:
// gemm<T, T> gives an activation, gemm<T, float> accumulates into an fp32 weight gradient (both
// gemm<float, float> for T = float).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/cuda_layer.hpp"
#include "cuda/norm_ops.hpp"
#include "plexus_cuda_kernels/gemm.hpp"

namespace plexus::transformer::cuda {

// What a training forward keeps for its backward (in the state's memory); a layer's state adds
// what its core keeps besides.
struct PreNormCudaState : CudaState {
  using CudaState::CudaState;
  Kept xhat;              // T: the pre-norm's normalized input [N, C]
  float* rstd = nullptr;  // and 1/std per token [N]
  Kept in;                // T: the input projection's output [N, in_rows]
  Kept mid;               // T: the core's output [N, mid_cols], the output projection's input
  Kept w_in, w_out;       // bf16 only: the forward's bf16 copies of the weights, for backward
};

template <class Derived, class Spec, class State>
class PreNormCudaLayer : public CudaLayer<Derived, Spec, State> {
  using Base = CudaLayer<Derived, Spec, State>;
  friend Base;

 public:
  using Base::Base;

 protected:
  // Every sequence length is taken unless the layer hides this.
  void expect_sequence(int64_t) const {}

  static std::size_t sz(int64_t v) { return static_cast<std::size_t>(v); }

 private:
  template <class T>
  void run_forward(State& st, const plx_forward_args& args, Context::Scope& scope) {
    const DLTensor& x = args.inputs[0];
    const Projections& pr = this->spec_.projections;
    const int64_t c = this->spec_.hidden;
    Tokens t;
    expect_hidden(x, this->device(), dtype_v<T>(), c, "input 0 (hidden states)", t.batch, t.seq);
    expect_tensor(args.outputs[0], this->device(), dtype_v<T>(), {t.batch, t.seq, c}, "output 0");
    this->expect_params(args.params, nullptr);
    self().expect_sequence(t.seq);
    Base::start_forward(st, args, t.batch, t.seq, act_v<T>);
    const bool train = st.record.saved;
    t.n = t.batch * t.seq;
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();

    // Kept for backward in the state, or in this call's temporaries.
    Arena temp(this->device());
    Arena& keep = train ? st.memory : temp;
    const float* w_norm = data<float>(args.params[0]);
    const float* b_norm = this->spec_.norm.rms ? nullptr : data<float>(args.params[1]);
    const T* w_in = operand_as<T>(data<float>(args.params[pr.in_index]), pr.in_rows * c, keep, stream);
    const T* w_out = operand_as<T>(data<float>(args.params[pr.in_index + 1]), c * pr.mid_cols, keep, stream);

    T* u = temp.take<T>(sz(t.n * c), stream);
    T* xhat = train ? keep.take<T>(sz(t.n * c), stream) : nullptr;
    st.rstd = train ? keep.take<float>(sz(t.n), stream) : nullptr;
    norm_forward<T>(this->spec_.norm, t.n, data<T>(x), w_norm, b_norm, u, xhat, st.rstd, stream);

    T* in = keep.take<T>(sz(t.n * pr.in_rows), stream);
    ck::gemm<T, T>(h, ck::Trans::N, ck::Trans::T, t.n, pr.in_rows, c, 1.0f, u, c, w_in, c, 0.0f, in,
                   pr.in_rows);
    const T* mid = self().template core_forward<T>(st, scope, keep, t, train, in);
    ck::gemm<T, T>(h, ck::Trans::N, ck::Trans::T, t.n, c, pr.mid_cols, 1.0f, mid, pr.mid_cols, w_out,
                   pr.mid_cols, 0.0f, data<T>(args.outputs[0]), c);
    st.xhat = xhat;
    st.in = train ? in : nullptr;
    st.mid = train ? mid : nullptr;
    // For T = float these are the call's parameters, which backward takes from its own call.
    st.w_in = train && act_v<T> == Act::bf16 ? w_in : nullptr;
    st.w_out = train && act_v<T> == Act::bf16 ? w_out : nullptr;
  }

  template <class T>
  void run_backward(State& st, const plx_backward_args& args, Context::Scope& scope) {
    const HiddenGrads<T> g = expect_hidden_backward<T>(this->spec_, this->spec_.hidden, st.record, args);
    const Projections& pr = this->spec_.projections;
    const int64_t c = this->spec_.hidden, rows = pr.in_rows, cols = pr.mid_cols;
    const Tokens t{g.batch, g.seq, g.batch * g.seq};
    ck::Handle& h = scope.handle();
    cudaStream_t stream = scope.stream();

    const float* w_norm = data<float>(args.params[0]);
    const float* b_norm = this->spec_.norm.rms ? nullptr : data<float>(args.params[1]);
    const T* w_in = kept_weight<T>(st.w_in, data<float>(args.params[pr.in_index]));
    const T* w_out = kept_weight<T>(st.w_out, data<float>(args.params[pr.in_index + 1]));
    float* dw_norm = grad_or_null(args.param_grads, 0);
    float* db_norm = this->spec_.norm.rms ? nullptr : grad_or_null(args.param_grads, 1);
    float* dw_in = grad_or_null(args.param_grads, pr.in_index);
    float* dw_out = grad_or_null(args.param_grads, pr.in_index + 1);
    const T* xhat = st.xhat.template get<T>();

    // f = mid W_out^T:  d_mid = df W_out,  dW_out += df^T mid.
    Arena temp(this->device());
    T* d_mid = temp.take<T>(sz(t.n * cols), stream);
    ck::gemm<T, T>(h, ck::Trans::N, ck::Trans::N, t.n, cols, c, 1.0f, g.dy, c, w_out, cols, 0.0f, d_mid,
                   cols);
    if (dw_out != nullptr)
      ck::gemm<T, float>(h, ck::Trans::T, ck::Trans::N, c, cols, t.n, 1.0f, g.dy, c, st.mid.template get<T>(),
                         cols, 1.0f, dw_out, cols);

    const T* d_in = self().template core_backward<T>(st, scope, temp, t, d_mid);

    // in = u W_in^T:  dW_in += d_in^T u,  du = d_in W_in; then the norm's backward.
    T* work = temp.take<T>(sz(t.n * c), stream);  // u, then du
    if (dw_in != nullptr) {
      norm_apply<T>(this->spec_.norm, t.n, xhat, w_norm, b_norm, work, stream);
      ck::gemm<T, float>(h, ck::Trans::T, ck::Trans::N, rows, c, t.n, 1.0f, d_in, rows, work, c, 1.0f, dw_in,
                         c);
    }
    if (g.dx != nullptr || dw_norm != nullptr || db_norm != nullptr) {
      ck::gemm<T, T>(h, ck::Trans::N, ck::Trans::N, t.n, c, rows, 1.0f, d_in, rows, w_in, c, 0.0f, work, c);
      norm_backward<T>(this->spec_.norm, h, t.n, work, xhat, st.rstd, w_norm, g.dx, dw_norm, db_norm);
    }
  }

  Derived& self() { return static_cast<Derived&>(*this); }
};

}  // namespace plexus::transformer::cuda

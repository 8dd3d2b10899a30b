// Attention and MLP on the CPU: both are f = out(core(in(norm(x)))), a pre-norm u = norm(x), an
// input projection in = u W_in^T, the layer's core from `in` to `mid` (causal attention with RoPE;
// the activation) and an output projection f = mid W_out^T, with the same parameters in the same
// places (the norm's weight, its bias for LayerNorm, W_in, then W_out). PreNormLayer runs a whole
// forward, backward and split backward (split_weights.hpp) but the core, with the calls each layer
// made on its own (same operands, same order of sums). Derived (CRTP) declares the parameters with
// add_parameters and provides
//   template <class T> void core_forward(State&, const Tokens&, bool train, T* in, T* mid);
//   template <class T> const T* core_backward(State&, const Tokens&, bool split, T* d_mid,
//                                             kernels::Buffer& call_d_in);  // returns d_in
// and may hide expect_sequence (the sequence lengths it refuses) and mid_gradient_buffer (where
// d_mid is written).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common.hpp"
#include "layer_specs.hpp"
#include "plexus_kernels/buffer.hpp"
#include "plexus_kernels/gemm.hpp"
#include "split_weights.hpp"

namespace plexus::transformer {

// What a microbatch's state keeps: of a training forward for its backward, and of a backward with
// PLX_BACKWARD_SKIP_WEIGHT_GRADS for backward_weights (the upstream gradient of each weight
// product; their other operands are mid and the norm's output, rebuilt from xhat), released once
// that ran. A layer's state adds what its core keeps besides.
class PreNormState : public plexus::sdk::LayerState {
 public:
  bool saved = false;
  Precision precision = Precision::f32;
  int64_t batch = 0, seq = 0;
  kernels::Buffer xhat, rstd;  // the pre-norm: normalized input [N, C] and 1/std per token
  kernels::Buffer in;          // the input projection's output [N, in_rows]
  kernels::Buffer mid;         // the core's output [N, mid_cols], the output projection's input
  bool weights_due = false;    // a backward left the weight gradients to backward_weights
  kernels::Buffer dy;          // the output gradient [N, C]: W_out's
  kernels::Buffer d_in;        // in's gradient [N, in_rows]: W_in's
  kernels::Buffer du;          // the pre-norm output's gradient [N, C]: the norm weight's (and bias's)
};

template <class Derived, class State>
class PreNormLayer : public SplitHiddenLayer<Derived, State> {
  using Base = SplitHiddenLayer<Derived, State>;
  friend class LayerShell<Derived, State>;
  friend class SplitHiddenLayer<Derived, State>;

 public:
  // Reads what every pre-norm layer takes from the model section: its norm and init_method_std.
  PreNormLayer(const char* component, const plx_layer_create_args& args) : Base(component, args) {
    const auto host = plexus::sdk::Host::current();
    norm_ = NormSpec::read(host, args.model_config, this->hidden_);
    init_std_ = positive_number(host, args.model_config, "init_method_std");
  }

 protected:
  // The checkpoint names of the parameters (Megatron-LM's), and the norm's in Megatron's
  // Transformer Engine spelling, which fuses the pre-norm into W_in (plx_param_spec.te_name).
  struct ParameterNames {
    const char* norm_weight;
    const char* norm_bias;  // LayerNorm only
    const char* in;         // W_in
    const char* out;        // W_out
    const char* norm_weight_te;
    const char* norm_bias_te;
  };
  // Declares the parameters in the order the calls read them, after norm_ is read: the norm's
  // weight (ones) and, for LayerNorm, bias (zeros), neither decayed; W_in [in_rows, C] and W_out
  // [C, mid_cols], normal with std init_method_std and `out_std`.
  //
  // Tensor parallelism (Megatron's column- and row-parallel pair): in_rows and mid_cols are this
  // rank's share; W_in is split on its rows, whose whole layout is the parts `in_parts` (whole
  // sizes; empty: one part), W_out on its columns. The norm's parameters are whole on every rank.
  // The forward's output is then a partial sum, all-reduced over tp; so is the backward's
  // gradient of the norm's output, before the norm's backward.
  void add_parameters(const ParameterNames& names, int64_t in_rows, int64_t mid_cols, double out_std,
                      std::vector<int64_t> in_parts = {}) {
    const int64_t c = this->hidden_;
    const uint32_t norm_flags = PLX_PARAM_NO_WEIGHT_DECAY | this->token_partial();
    this->params_.push_back(make_param(names.norm_weight, {c}, PLX_INIT_ONES, 0, norm_flags));
    this->params_.back().te_name = names.norm_weight_te;
    if (!norm_.rms) {
      this->params_.push_back(make_param(names.norm_bias, {c}, PLX_INIT_ZEROS, 0, norm_flags));
      this->params_.back().te_name = names.norm_bias_te;
    }
    projections_ = {static_cast<uint32_t>(this->params_.size()), in_rows, mid_cols};
    in_parts_ = std::move(in_parts);
    this->params_.push_back(make_param(names.in, {in_rows, c}, PLX_INIT_NORMAL, init_std_, 0));
    mark_split(this->params_.back(), 0, in_parts_);
    this->params_.push_back(make_param(names.out, {c, mid_cols}, PLX_INIT_NORMAL, out_std, 0));
    mark_split(this->params_.back(), 1, {});
  }

  // The parts of a device implementation's spec this class knows (and TransformerLayer's).
  void fill_spec(PreNormSpec& spec) const {
    this->TransformerLayer::fill_spec(spec);
    spec.hidden = this->hidden_;
    spec.norm = norm_;
    spec.projections = projections_;
  }

  // The bytes of what a training forward keeps beyond the pre-norm and the two projections'
  // buffers, for the call's tokens `t` on a rank of a cp group of `cp` ranks; none unless the
  // layer hides this.
  double core_saved_bytes(const Tokens& /*t*/, uint32_t /*cp*/, double /*element*/) const { return 0; }

 public:
  // ABI 1.10: the pre-norm's normalized input and 1/std (this rank's tokens), the input
  // projection's output and the core's output (the call's tokens: all tp ranks' blocks under
  // sequence parallelism), and the core's own.
  double estimate_activation_bytes(uint32_t num_inputs, const plx_tensor_desc* inputs,
                                   const plx_activation_query& query) const override {
    this->expect_descs("estimate_activation_bytes", num_inputs, 1);
    this->expect_hidden_desc(inputs[0]);
    this->refuse_estimate_on_device();
    const CallTokens tokens = call_tokens(inputs[0].dims[0], inputs[0].dims[1]);
    const double element = this->element_bytes(inputs[0]);
    const auto local = static_cast<double>(tokens.local.n), full = static_cast<double>(tokens.full.n);
    const double kept = local * static_cast<double>(this->hidden_ + 1) +
                        full * static_cast<double>(projections_.in_rows + projections_.mid_cols);
    return element * kept + self().core_saved_bytes(tokens.full, query.cp_size, element);
  }

 protected:
  // Every sequence length is taken unless the layer hides this.
  void expect_sequence(int64_t) const {}
  // Where a backward writes d_mid, unless the layer hides this: the call's buffer.
  kernels::Buffer& mid_gradient_buffer(State&, bool /*split*/, kernels::Buffer& call) const { return call; }

  static std::size_t sz(int64_t v) { return static_cast<std::size_t>(v); }

  NormSpec norm_;
  double init_std_ = 0;  // init_method_std
  Projections projections_;
  std::vector<int64_t> in_parts_;  // W_in's whole row parts (tensor parallelism)

 private:
  // The tokens of a call: `local` as the hidden states hold them, and `full`, what the
  // tensor-parallel region between the projections runs on: under sequence parallelism every tp
  // rank's block (tp x local.n, the microbatch in order), else the same.
  struct CallTokens {
    Tokens local, full;
  };
  CallTokens call_tokens(int64_t batch, int64_t seq) const {
    const int64_t ranks = this->sp_ ? this->tp_.size() : 1;
    return {{batch, seq, batch * seq}, {batch, seq * ranks, batch * seq * ranks}};
  }

  template <class T>
  void run_forward(State& st, const plx_forward_args& args) {
    const Projections& pr = projections_;
    const int64_t c = this->hidden_;
    const DLDataType dt = dtype_of(precision_v<T>);
    int64_t batch = 0, seq = 0;
    expect_hidden(args.inputs[0], this->device_, dt, c, "input 0 (hidden states)", batch, seq);
    expect_tensor(args.outputs[0], this->device_, dt, {batch, seq, c}, "output 0");
    this->expect_params(args.params, nullptr, dt);
    const CallTokens tokens = call_tokens(batch, seq);
    const Tokens& t = tokens.full;
    self().expect_sequence(t.seq);
    const bool train = (args.flags & PLX_FORWARD_TRAINING) != 0;
    st.saved = train;
    st.precision = precision_v<T>;
    st.batch = batch;
    st.seq = seq;

    const T* w_norm = data<T>(args.params[0]);
    const T* b_norm = norm_.rms ? nullptr : data<T>(args.params[1]);
    const T* w_in = data<T>(args.params[pr.in_index]);
    const T* w_out = data<T>(args.params[pr.in_index + 1]);

    // The norm on this rank's tokens (under sequence parallelism then gathered: Megatron's
    // all-gather before a column-parallel product). A forward that does not train keeps nothing:
    // `in` and `mid` live in the call's buffers.
    const int64_t n_local = tokens.local.n;
    kernels::Buffer u_buf, u_local_buf, call_in, call_mid, out_buf;
    T* u = u_buf.get<T>(sz(t.n * c));
    T* u_local = this->sp_ ? u_local_buf.get<T>(sz(n_local * c)) : u;
    T* xhat = train ? st.xhat.template get<T>(sz(n_local * c)) : nullptr;
    T* rstd = train ? st.rstd.template get<T>(sz(n_local)) : nullptr;
    norm_.template forward<T>(n_local, data<T>(args.inputs[0]), w_norm, b_norm, u_local, xhat, rstd);
    if (this->sp_) this->tp_.gather_rows(u_local, u, n_local, c, dt, this->device_);

    T* in = (train ? st.in : call_in).template get<T>(sz(t.n * pr.in_rows));
    kernels::gemm_parallel<T>(kernels::Trans::N, kernels::Trans::T, t.n, pr.in_rows, c, T(1), u, c, w_in, c,
                              T(0), in, pr.in_rows);
    T* mid = (train ? st.mid : call_mid).template get<T>(sz(t.n * pr.mid_cols));
    self().template core_forward<T>(st, t, train, in, mid);
    // Row-parallel: the ranks' partial sums, all-reduced, or reduce-scattered to each rank's tokens.
    T* out = this->sp_ ? out_buf.get<T>(sz(t.n * c)) : data<T>(args.outputs[0]);
    kernels::gemm_parallel<T>(kernels::Trans::N, kernels::Trans::T, t.n, c, pr.mid_cols, T(1), mid,
                              pr.mid_cols, w_out, pr.mid_cols, T(0), out, c);
    if (this->sp_)
      this->tp_.finish(
          this->tp_.start_scatter_sum_rows(out, data<T>(args.outputs[0]), n_local, c, dt, this->device_));
    else
      this->tp_.all_reduce(args.outputs[0]);
  }

  // The norm output's gradient du = d_in W_in [n, C] into `du_full`, summed over tp (each rank's
  // W_in holds its rows only) into `du` (this rank's tokens' rows: under sequence parallelism a
  // reduce-scatter, else an all-reduce in place, du == du_full), and started: the caller finishes
  // the returned request once it has computed what does not need du (Megatron overlaps it with
  // the weight gradient).
  template <class T>
  plx_request reduce_norm_output_gradient(const CallTokens& tokens, const T* d_in, const T* w_in, T* du_full,
                                          T* du) {
    const int64_t c = this->hidden_, n = tokens.full.n;
    kernels::gemm_parallel<T>(kernels::Trans::N, kernels::Trans::N, n, c, projections_.in_rows, T(1), d_in,
                              projections_.in_rows, w_in, c, T(0), du_full, c);
    const DLDataType dt = dtype_of(precision_v<T>);
    if (this->sp_) return this->tp_.start_scatter_sum_rows(du_full, du, tokens.local.n, c, dt, this->device_);
    int64_t shape[2] = {n, c};
    DLTensor view{du_full, this->device_, 2, dt, shape, nullptr, 0};
    return this->tp_.start_all_reduce(view);
  }

  // The input projection's input u = norm(x) for all of the call's tokens, rebuilt from this
  // rank's xhat (and under sequence parallelism gathered again, as Megatron does rather than
  // keeping the gathered input) into `u` [full n, C].
  template <class T>
  void rebuild_input(const CallTokens& tokens, const T* w_norm, const T* b_norm, const T* xhat, T* u) const {
    if (!this->sp_) {
      norm_.template apply<T>(tokens.local.n, xhat, w_norm, b_norm, u);
      return;
    }
    kernels::Buffer local;
    T* u_local = local.get<T>(sz(tokens.local.n * norm_.cols));
    norm_.template apply<T>(tokens.local.n, xhat, w_norm, b_norm, u_local);
    this->tp_.gather_rows(u_local, u, tokens.local.n, norm_.cols, dtype_of(precision_v<T>), this->device_);
  }

  // With PLX_BACKWARD_SKIP_WEIGHT_GRADS: the input gradient only, and the weight gradients'
  // upstream gradients kept in the state for run_backward_weights.
  template <class T>
  void run_backward(State& st, const plx_backward_args& args) {
    const Projections& pr = projections_;
    const int64_t c = this->hidden_;
    const auto io = this->template expect_backward<T>(st, args);
    const CallTokens tokens = call_tokens(io.batch, io.seq);
    const Tokens& t = tokens.full;
    const bool split = skips_weight_grads(args);
    const T* w_norm = data<T>(args.params[0]);
    const T* b_norm = norm_.rms ? nullptr : data<T>(args.params[1]);
    const T* w_in = data<T>(args.params[pr.in_index]);
    const T* w_out = data<T>(args.params[pr.in_index + 1]);

    // Under sequence parallelism the output gradient of every rank's tokens (the backward of the
    // forward's reduce-scatter).
    kernels::Buffer dy_buf;
    const T* dy = io.dy;
    if (this->sp_) {
      T* gathered = dy_buf.get<T>(sz(t.n * c));
      this->tp_.gather_rows(io.dy, gathered, tokens.local.n, c, dtype_of(precision_v<T>), this->device_);
      dy = gathered;
    }
    // f = mid W_out^T:  d_mid = df W_out,  dW_out += df^T mid.
    kernels::Buffer call_d_mid, call_d_in, du_full_buf;
    T* d_mid = self().mid_gradient_buffer(st, split, call_d_mid).template get<T>(sz(t.n * pr.mid_cols));
    kernels::gemm_parallel<T>(kernels::Trans::N, kernels::Trans::N, t.n, pr.mid_cols, c, T(1), dy, c, w_out,
                              pr.mid_cols, T(0), d_mid, pr.mid_cols);
    if (split)
      std::copy(dy, dy + t.n * c, st.dy.template get<T>(sz(t.n * c)));
    else
      out_weights<T>(t.n, dy, st.mid.template data<T>(),
                     Base::template grad_or_null<T>(args.param_grads, pr.in_index + 1));

    // The core (which, in a split backward, also releases what backward_weights does not need).
    const T* d_in = self().template core_backward<T>(st, t, split, d_mid, call_d_in);

    // in = u W_in^T:  dW_in += d_in^T u,  du = d_in W_in; then the norm's backward.
    const int64_t n_local = tokens.local.n;
    if (split) {
      // The input gradient now; the norm's weight gradients from the same du later (the kernel
      // sums the same partial products whether or not it also writes dx).
      T* du = st.du.template get<T>(sz(n_local * c));
      T* du_full = this->sp_ ? du_full_buf.get<T>(sz(t.n * c)) : du;
      this->tp_.finish(reduce_norm_output_gradient<T>(tokens, d_in, w_in, du_full, du));
      if (io.dx != nullptr)
        norm_.template backward<T>(n_local, du, st.xhat.template data<T>(), st.rstd.template data<T>(),
                                   w_norm, io.dx, nullptr, nullptr);
      return;
    }
    T* dw_norm = Base::template grad_or_null<T>(args.param_grads, 0);
    T* db_norm = norm_.rms ? nullptr : Base::template grad_or_null<T>(args.param_grads, 1);
    T* dw_in = Base::template grad_or_null<T>(args.param_grads, pr.in_index);
    const bool norm_backward = io.dx != nullptr || dw_norm != nullptr || db_norm != nullptr;
    // u first (its gather is a collective), then du's sum over tp runs while this rank computes
    // W_in's gradient.
    kernels::Buffer u_buf, du_buf;
    T* u = dw_in != nullptr ? u_buf.get<T>(sz(t.n * c)) : nullptr;
    if (u != nullptr) rebuild_input<T>(tokens, w_norm, b_norm, st.xhat.template data<T>(), u);
    T* du = norm_backward ? du_buf.get<T>(sz(n_local * c)) : nullptr;
    T* du_full = norm_backward && this->sp_ ? du_full_buf.get<T>(sz(t.n * c)) : du;
    const plx_request du_summed =
        norm_backward ? reduce_norm_output_gradient<T>(tokens, d_in, w_in, du_full, du) : nullptr;
    if (u != nullptr) input_projection_weights<T>(t.n, d_in, u, dw_in);
    this->tp_.finish(du_summed);
    if (norm_backward)
      norm_.template backward<T>(n_local, du, st.xhat.template data<T>(), st.rstd.template data<T>(), w_norm,
                                 io.dx, dw_norm, db_norm);
  }

  // The weight gradients a backward with PLX_BACKWARD_SKIP_WEIGHT_GRADS left out, from what it
  // kept, through the same calls as the unsplit backward; then what was kept is released.
  template <class T>
  void run_backward_weights(State& st, const plx_backward_args& args) {
    const Projections& pr = projections_;
    const CallTokens tokens = call_tokens(st.batch, st.seq);
    const int64_t n = tokens.full.n;
    out_weights<T>(n, st.dy.template data<T>(), st.mid.template data<T>(),
                   Base::template grad_or_null<T>(args.param_grads, pr.in_index + 1));
    const T* w_norm = data<T>(args.params[0]);
    const T* b_norm = norm_.rms ? nullptr : data<T>(args.params[1]);
    T* dw_norm = Base::template grad_or_null<T>(args.param_grads, 0);
    T* db_norm = norm_.rms ? nullptr : Base::template grad_or_null<T>(args.param_grads, 1);
    if (T* dw_in = Base::template grad_or_null<T>(args.param_grads, pr.in_index)) {
      kernels::Buffer u;
      T* rebuilt = u.get<T>(sz(n * norm_.cols));
      rebuild_input<T>(tokens, w_norm, b_norm, st.xhat.template data<T>(), rebuilt);
      input_projection_weights<T>(n, st.d_in.template data<T>(), rebuilt, dw_in);
    }
    if (dw_norm != nullptr || db_norm != nullptr)
      norm_.template backward<T>(tokens.local.n, st.du.template data<T>(), st.xhat.template data<T>(),
                                 st.rstd.template data<T>(), w_norm, nullptr, dw_norm, db_norm);
    for (kernels::Buffer* kept : {&st.dy, &st.d_in, &st.du, &st.mid, &st.xhat, &st.rstd}) kept->release();
    st.saved = false;  // what a backward needs is gone
  }

  // dW_out += df^T mid (dw_out may be null: no gradient wanted).
  template <class T>
  void out_weights(int64_t n, const T* dy, const T* mid, T* dw_out) const {
    const int64_t c = this->hidden_, cols = projections_.mid_cols;
    if (dw_out != nullptr)
      kernels::gemm_parallel<T>(kernels::Trans::T, kernels::Trans::N, c, cols, n, T(1), dy, c, mid, cols,
                                T(1), dw_out, cols);
  }

  // The input projection's weight gradient, dW_in += d_in^T u, from u rebuilt (rebuild_input):
  // the unsplit backward and backward_weights both call it.
  template <class T>
  void input_projection_weights(int64_t n, const T* d_in, const T* u, T* dw_in) const {
    const int64_t rows = projections_.in_rows;
    kernels::gemm_parallel<T>(kernels::Trans::T, kernels::Trans::N, rows, norm_.cols, n, T(1), d_in, rows, u,
                              norm_.cols, T(1), dw_in, norm_.cols);
  }

  const Derived& self() const { return static_cast<const Derived&>(*this); }
  Derived& self() { return static_cast<Derived&>(*this); }
};

}  // namespace plexus::transformer

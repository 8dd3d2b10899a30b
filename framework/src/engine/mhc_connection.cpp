// The mHC connection around each decoder layer (docs/mhc.md): n residual streams, and the four
// primitives of an "mhc" fusion backend around the layer F:
//   forward:  p, r = proj_rms(x);  H = mappings(p, r);  u = aggregate(x, H_pre);  f = F(u);
//             y = post_res(x, H_res, H_post, f)
//   backward: dx, dH_res, dH_post, df = post_res';  du = F'(df);  dx += aggregate'(du) (and dH_pre);
//             dp, dr = mappings'(dH_*);  dx += proj_rms'(dp, dr)
// The streams are x[t, j, :] for token t = b * S + s; after the embedding every stream is a copy
// of its output, and the final norm reads their mean.
//
// The connection's own parameters (phi, the three gates, the bias) are declared per decoder unit
// into the model's store, named after Megatron's modules, so the optimizer, checkpoints and
// resume treat them like any other; their values are read from the store at each call (under a
// data-parallel strategy they are views that change between calls).
#include <array>
#include <initializer_list>

#include "engine/connection.hpp"
#include "engine/device_ops.hpp"
#include "plexus/core/mhc_backend.hpp"

namespace plexus {
namespace {

// A view of a tensor's memory under another shape with the same element count (the backend
// works on tokens, [T, C]; layers on [B, S, C]). The view points into this object: not movable.
class Reshaped {
 public:
  Reshaped(const Tensor& t, std::initializer_list<int64_t> shape) : view_(t.view()) {
    std::copy(shape.begin(), shape.end(), dims_.begin());
    view_.ndim = static_cast<int>(shape.size());
    view_.shape = dims_.data();
  }
  Reshaped(const Reshaped&) = delete;
  Reshaped& operator=(const Reshaped&) = delete;
  DLTensor* get() { return &view_; }

 private:
  std::array<int64_t, 4> dims_{};
  DLTensor view_;
};

// What the connection around one decoder unit keeps from forward for backward: its input stream x
// [T, n, C], the mapping tensors and F's output f. The backward gradients live here between the
// unit's first and last backward stage.
struct Saved {
  Tensor x, p, r, h_pre, h_post, h_res, u, f;
  Tensor dx, df, dh_pre, dh_post, dh_res;
};

struct MhcState final : ConnectionState {
  ConnectionRun run;
  int64_t tokens = 0;
  Tensor stream;             // x [T, n, C]
  Tensor grad;               // its gradient, during backward
  Tensor contracted;         // the mean of the streams, the final norm's input
  Tensor summed_grad;        // the streams' gradient summed, the embedding's output gradient
  std::vector<Saved> saved;  // per model unit
};

MhcState& mhc(ConnectionState& state) {
  return static_cast<MhcState&>(state);
}

// The step-profile part of the streams' own work: the copies after the embedding, the mean before
// the final norm, and their adjoints.
const std::string& streams_part() {
  static const std::string name = "mHC streams (expand, mean, adjoints)";
  return name;
}

class MhcConnection final : public Connection {
 public:
  MhcConnection(const PluginHost& host, const ModelSettings& settings, DLDevice device, ParameterStore& store)
      : settings_(settings),
        device_(device),
        store_(store),
        config_(settings.mhc.options, "mhc.options"),
        backend_(host.get(PLX_KIND_FUSION_BACKEND, settings.mhc.backend), device, config_.get()) {}

  // The connection's own parameters (mhc.md): phi [n*C, n*n + 2n] Xavier-uniform, the three gates
  // (scalars) at init_gating_factor and the bias b [n*n + 2n] at zero; gates and bias without
  // weight decay. phi is held as the "mhc" family takes it; checkpoints store its transpose, the
  // layout of Megatron's nn.Linear (checkpoint/stored_tensor.hpp).
  std::vector<std::size_t> declare(std::size_t unit, const std::string& prefix, const std::string& unit_label,
                                   ParameterStore& store) override {
    const int64_t n = settings_.mhc.streams, c = settings_.hidden_size, width = n * n + 2 * n;
    Around& a = around(unit);
    a.unit = unit_label;
    a.label = unit_label + " mHC";
    const auto declare = [&](const char* name, std::initializer_list<int64_t> dims, uint32_t init,
                             double init_a, uint32_t flags) {
      plx_param_spec spec{};
      spec.struct_size = sizeof(spec);
      // Under sequence parallelism the streams are this rank's tokens: the gradients are parts.
      spec.flags = flags | (settings_.sequence_parallel ? PLX_PARAM_SEQUENCE_PARALLEL : 0u);
      spec.name = name;
      spec.desc.ndim = static_cast<uint32_t>(dims.size());
      spec.desc.dtype = plx_dtype_f32();
      std::copy(dims.begin(), dims.end(), spec.desc.dims);
      spec.init = init;
      spec.init_a = init_a;
      return store.declare(spec, prefix, a.label);
    };
    const double gating = settings_.mhc.init_gating;
    a.phi = declare("mapping_proj.weight", {n * c, width}, PLX_INIT_XAVIER_UNIFORM, 1.0, 0);
    a.alpha_pre = declare("alpha_pre", {1}, PLX_INIT_CONSTANT, gating, PLX_PARAM_NO_WEIGHT_DECAY);
    a.alpha_post = declare("alpha_post", {1}, PLX_INIT_CONSTANT, gating, PLX_PARAM_NO_WEIGHT_DECAY);
    a.alpha_res = declare("alpha_res", {1}, PLX_INIT_CONSTANT, gating, PLX_PARAM_NO_WEIGHT_DECAY);
    a.bias = declare("bias", {width}, PLX_INIT_ZEROS, 0.0, PLX_PARAM_NO_WEIGHT_DECAY);
    a.alpha = Tensor({3}, plx_dtype_f32(), device_);
    return {a.phi, a.alpha_pre, a.alpha_post, a.alpha_res, a.bias};
  }

  std::unique_ptr<ConnectionState> start(const ConnectionRun& run) const override {
    auto state = std::make_unique<MhcState>();
    state->run = run;
    state->tokens = run.batch * run.seq;
    state->saved.resize(around_.size());
    return state;
  }

  void enter(ConnectionState& state, Tensor embedded) const override {
    MhcState& s = mhc(state);
    const StepProfile::Scope timed(s.run.profile, streams_part(), StepProfile::Phase::forward);
    s.stream = written_activation({s.tokens, streams(), hidden()});
    device_ops::expand_streams(embedded, s.tokens, streams(), hidden(), s.stream);
  }

  const Tensor& layer_input(ConnectionState& state, std::size_t unit, bool first_stage) const override {
    MhcState& s = mhc(state);
    if (!first_stage) return s.saved[unit].u;
    const StepProfile::Scope timed(s.run.profile, around_[unit].label, StepProfile::Phase::forward);
    return before_layer(s, unit);
  }

  void fold(ConnectionState& state, std::size_t unit, Tensor f) const override {
    MhcState& s = mhc(state);
    const StepProfile::Scope timed(s.run.profile, around_[unit].label, StepProfile::Phase::forward);
    after_layer(s, unit, std::move(f));
    s.saved[unit].u = Tensor();  // F has what it needs for its backward
  }

  const Tensor& leave(ConnectionState& state, bool first_stage) const override {
    MhcState& s = mhc(state);
    if (!first_stage) return s.contracted;
    const StepProfile::Scope timed(s.run.profile, streams_part(), StepProfile::Phase::forward);
    s.contracted = written_activation({s.run.batch, s.run.seq, hidden()});
    device_ops::mean_streams(s.stream, s.tokens, streams(), hidden(), s.contracted);
    s.stream = Tensor();  // the mean's backward does not need the streams
    return s.contracted;
  }

  void leave_backward(ConnectionState& state, Tensor grad) const override {
    MhcState& s = mhc(state);
    const StepProfile::Scope timed(s.run.profile, streams_part(), StepProfile::Phase::backward);
    s.grad = written_activation({s.tokens, streams(), hidden()});
    device_ops::spread_streams(grad, s.tokens, streams(), hidden(), s.grad);
  }

  const Tensor& layer_output_grad(ConnectionState& state, std::size_t unit, bool first_stage) const override {
    MhcState& s = mhc(state);
    if (!first_stage) return s.saved[unit].df;
    const StepProfile::Scope timed(s.run.profile, around_[unit].label, StepProfile::Phase::backward);
    return before_layer_backward(s, unit);
  }

  void fold_backward(ConnectionState& state, std::size_t unit, Tensor du) const override {
    MhcState& s = mhc(state);
    const StepProfile::Scope timed(s.run.profile, around_[unit].label, StepProfile::Phase::backward);
    after_layer_backward(s, unit, std::move(du));
  }

  const Tensor& enter_backward(ConnectionState& state, bool first_stage) const override {
    MhcState& s = mhc(state);
    if (!first_stage) return s.summed_grad;
    const StepProfile::Scope timed(s.run.profile, streams_part(), StepProfile::Phase::backward);
    s.summed_grad = written_activation({s.run.batch, s.run.seq, hidden()});
    device_ops::sum_streams(s.grad, s.tokens, streams(), hidden(), s.summed_grad);
    return s.summed_grad;
  }

  Tensor take_stream(ConnectionState& state) const override { return std::move(mhc(state).stream); }
  void set_stream(ConnectionState& state, Tensor stream) const override {
    mhc(state).stream = std::move(stream);
  }
  Tensor take_grad(ConnectionState& state) const override { return std::move(mhc(state).grad); }
  void set_grad(ConnectionState& state, Tensor grad) const override { mhc(state).grad = std::move(grad); }

  // The matrix products of one connection per token, 2 FLOPs per multiply-add, n streams of width
  // C: the mapping projection of the flattened streams (nC x (n^2 + 2n)), the aggregation (n C),
  // the residual mix H_res (n^2 C) and h_post times F's output (n C): n C (n + 1)(n + 2)
  // multiply-adds. Backward computes two products for each (the input's and the weight's
  // gradient), twice the forward. Sinkhorn's n x n iterations and the norms are not products.
  std::vector<int64_t> stream_shape(int64_t batch, int64_t seq) const override {
    return {batch * seq, streams(), hidden()};
  }

  double flops_per_token() const override {
    const auto n = static_cast<double>(settings_.mhc.streams);
    const auto c = static_cast<double>(settings_.hidden_size);
    const double forward = 2 * n * c * (n + 1) * (n + 2);
    return 3 * forward;
  }

  // Around a unit (Saved): its input streams x [T, n, C] and F's output f [T, C] in the
  // activations' dtype; proj_rms's p [T, n^2 + 2n] and r [T] and the mappings h_pre, h_post [T, n]
  // and h_res [T, n, n] in float32. The stream [T, n, C] and its contraction [T, C] at the end.
  double kept_bytes_per_unit(int64_t tokens, double element) const override {
    const auto n = static_cast<double>(settings_.mhc.streams);
    const auto c = static_cast<double>(settings_.hidden_size);
    const auto t = static_cast<double>(tokens);
    return element * t * (n * c + c) + 4.0 * t * (2 * n * n + 4 * n + 1);
  }
  double stream_bytes(int64_t tokens, double element) const override {
    const auto n = static_cast<double>(settings_.mhc.streams);
    return element * static_cast<double>(tokens) * static_cast<double>(settings_.hidden_size) * (n + 1);
  }

 private:
  // The connection's parameters around one decoder unit (indices into the store) and the three
  // gates packed as the [3] tensor the family takes.
  struct Around {
    std::size_t phi = 0, alpha_pre = 0, alpha_post = 0, alpha_res = 0, bias = 0;
    mutable Tensor alpha;  // scratch, rewritten from the gates before every use
    std::string unit;      // the decoder unit's label
    std::string label;     // "<unit label> mHC": its parameters' owner, its part in a step profile
  };
  Around& around(std::size_t unit) {
    if (around_.size() <= unit) around_.resize(unit + 1);
    return around_[unit];
  }

  int64_t streams() const { return settings_.mhc.streams; }
  int64_t hidden() const { return settings_.hidden_size; }
  plx_mhc_problem problem(const MhcState& s) const {
    plx_mhc_problem p{};
    p.struct_size = sizeof(p);
    p.flags = settings_.mhc.transposed ? PLX_MHC_TRANSPOSED_H_RES : 0u;
    p.num_streams = streams();
    p.hidden_size = hidden();
    p.num_tokens = s.tokens;
    p.sinkhorn_iterations = settings_.mhc.iterations;
    p.eps = settings_.mhc.eps;
    return p;
  }
  // The family's two dtypes (mhc.h): mapping tensors (p, r, H and their gradients) are float32;
  // activations (the streams x, F's input u and output f, and their gradients) have the model's
  // activation dtype (run.precision). written_*: for what a primitive WRITES in full (mhc.h: every
  // output but dx and the parameter gradients).
  Tensor f32(std::vector<int64_t> shape) const { return Tensor(std::move(shape), plx_dtype_f32(), device_); }
  Tensor activation(std::vector<int64_t> shape) const {
    return Tensor(std::move(shape), settings_.activation_dtype, device_);
  }
  Tensor written_f32(std::vector<int64_t> shape) const {
    return Tensor::uninitialized(std::move(shape), plx_dtype_f32(), device_);
  }
  Tensor written_activation(std::vector<int64_t> shape) const {
    return Tensor::uninitialized(std::move(shape), settings_.activation_dtype, device_);
  }

  // Before F: proj_rms, mappings and aggregate on the stream; returns F's input u [B, S, C].
  const Tensor& before_layer(MhcState& st, std::size_t unit) const {
    const Around& c = around_[unit];
    Saved& s = st.saved[unit];
    const plx_mhc_problem prob = problem(st);
    const int64_t n = streams(), width = n * n + 2 * n, tokens = st.tokens;
    // The gates are three parameters (one checkpoint name each); the family takes them as one [3].
    device_ops::copy_element(c.alpha, 0, store_[c.alpha_pre].value, 0);
    device_ops::copy_element(c.alpha, 1, store_[c.alpha_post].value, 0);
    device_ops::copy_element(c.alpha, 2, store_[c.alpha_res].value, 0);

    s.x = std::move(st.stream);
    s.p = written_f32({tokens, width});
    s.r = written_f32({tokens});
    s.h_pre = written_f32({tokens, n});
    s.h_post = written_f32({tokens, n});
    s.h_res = written_f32({tokens, n, n});
    s.u = written_activation({st.run.batch, st.run.seq, hidden()});
    DLTensor x = s.x.view(), phi = store_[c.phi].value.view(), p = s.p.view(), r = s.r.view();
    DLTensor alpha_view = c.alpha.view(), b = store_[c.bias].value.view();
    DLTensor h_pre = s.h_pre.view(), h_post = s.h_post.view(), h_res = s.h_res.view();
    Reshaped out(s.u, {tokens, hidden()});
    const plx_mhc_proj_rms_forward_args proj{.struct_size = sizeof(plx_mhc_proj_rms_forward_args),
                                             .reserved = 0,
                                             .x = &x,
                                             .phi = &phi,
                                             .p = &p,
                                             .r = &r};
    backend_.proj_rms_forward(prob, proj, nullptr);
    const plx_mhc_mappings_forward_args maps{.struct_size = sizeof(plx_mhc_mappings_forward_args),
                                             .reserved = 0,
                                             .p = &p,
                                             .r = &r,
                                             .alpha = &alpha_view,
                                             .b = &b,
                                             .h_pre = &h_pre,
                                             .h_post = &h_post,
                                             .h_res = &h_res};
    backend_.mappings_forward(prob, maps, nullptr);
    const plx_mhc_aggregate_forward_args agg{.struct_size = sizeof(plx_mhc_aggregate_forward_args),
                                             .reserved = 0,
                                             .x = &x,
                                             .h_pre = &h_pre,
                                             .u = out.get()};
    backend_.aggregate_forward(prob, agg, nullptr);
    return s.u;
  }

  // After F: post_res makes the new stream from F's output.
  void after_layer(MhcState& st, std::size_t unit, Tensor f) const {
    Saved& s = st.saved[unit];
    const plx_mhc_problem prob = problem(st);
    s.f = std::move(f);
    Tensor y = written_activation({st.tokens, streams(), hidden()});
    DLTensor x = s.x.view(), h_res = s.h_res.view(), h_post = s.h_post.view(), y_view = y.view();
    Reshaped f_view(s.f, {st.tokens, hidden()});
    const plx_mhc_post_res_forward_args post{.struct_size = sizeof(plx_mhc_post_res_forward_args),
                                             .reserved = 0,
                                             .x = &x,
                                             .h_res = &h_res,
                                             .h_post = &h_post,
                                             .f = f_view.get(),
                                             .bias = nullptr,
                                             .y = &y_view};
    backend_.post_res_forward(prob, post, nullptr);
    if (const int64_t bad = device_ops::first_non_finite(y); bad >= 0)
      throw NonFiniteError("non-finite value in the mHC streams after " + around_[unit].unit + " (element " +
                           std::to_string(bad) + ", microbatch " + std::to_string(st.run.microbatch) +
                           "): the first layer that produced one");
    st.stream = std::move(y);
    if (!st.run.training) s = Saved{};  // nothing is kept for a backward that will not come
  }

  // Before F's backward: post_res backward; returns df, F's upstream gradient.
  const Tensor& before_layer_backward(MhcState& st, std::size_t unit) const {
    Saved& s = st.saved[unit];
    const plx_mhc_problem prob = problem(st);
    const int64_t n = streams(), tokens = st.tokens;
    s.dx = activation({tokens, n, hidden()});  // zeros: three primitives accumulate into it
    s.df = written_activation({st.run.batch, st.run.seq, hidden()});
    s.dh_res = written_f32({tokens, n, n});
    s.dh_post = written_f32({tokens, n});
    DLTensor x = s.x.view(), h_res = s.h_res.view(), h_post = s.h_post.view(), dy = st.grad.view();
    DLTensor dx = s.dx.view(), dh_res = s.dh_res.view(), dh_post = s.dh_post.view();
    Reshaped f_view(s.f, {tokens, hidden()});
    Reshaped df_view(s.df, {tokens, hidden()});
    const plx_mhc_post_res_backward_args post{.struct_size = sizeof(plx_mhc_post_res_backward_args),
                                              .reserved = 0,
                                              .x = &x,
                                              .h_res = &h_res,
                                              .h_post = &h_post,
                                              .f = f_view.get(),
                                              .bias = nullptr,
                                              .dy = &dy,
                                              .dx = &dx,
                                              .dh_res = &dh_res,
                                              .dh_post = &dh_post,
                                              .df = df_view.get(),
                                              .dbias = nullptr};
    backend_.post_res_backward(prob, post, nullptr);
    s.f = Tensor();
    return s.df;
  }

  // After F's backward (du is F's input gradient): aggregate, mappings and proj_rms backward; the
  // stream's gradient becomes dx.
  void after_layer_backward(MhcState& st, std::size_t unit, Tensor du) const {
    const Around& c = around_[unit];
    Saved& s = st.saved[unit];
    const plx_mhc_problem prob = problem(st);
    const int64_t n = streams(), width = n * n + 2 * n, tokens = st.tokens;
    s.dh_pre = written_f32({tokens, n});
    Tensor dp = written_f32({tokens, width}), dr = written_f32({tokens});
    Tensor dalpha = f32({3});  // accumulated
    DLTensor x = s.x.view(), h_pre = s.h_pre.view(), dx = s.dx.view(), dh_pre = s.dh_pre.view();
    Reshaped du_view(du, {tokens, hidden()});
    const plx_mhc_aggregate_backward_args agg{.struct_size = sizeof(plx_mhc_aggregate_backward_args),
                                              .reserved = 0,
                                              .x = &x,
                                              .h_pre = &h_pre,
                                              .du = du_view.get(),
                                              .dx = &dx,
                                              .dh_pre = &dh_pre};
    backend_.aggregate_backward(prob, agg, nullptr);

    DLTensor p = s.p.view(), r = s.r.view(), alpha = c.alpha.view(), b = store_[c.bias].value.view();
    DLTensor dh_post = s.dh_post.view(), dh_res = s.dh_res.view();
    DLTensor dp_view = dp.view(), dr_view = dr.view(), dalpha_view = dalpha.view(),
             db = store_[c.bias].grad.view();
    const plx_mhc_mappings_backward_args maps{.struct_size = sizeof(plx_mhc_mappings_backward_args),
                                              .reserved = 0,
                                              .p = &p,
                                              .r = &r,
                                              .alpha = &alpha,
                                              .b = &b,
                                              .dh_pre = &dh_pre,
                                              .dh_post = &dh_post,
                                              .dh_res = &dh_res,
                                              .dp = &dp_view,
                                              .dr = &dr_view,
                                              .dalpha = &dalpha_view,
                                              .db = &db};
    backend_.mappings_backward(prob, maps, nullptr);
    // The [3] gradient back into the three gates' gradients (each [1]).
    device_ops::add_element(store_[c.alpha_pre].grad, 0, dalpha, 0);
    device_ops::add_element(store_[c.alpha_post].grad, 0, dalpha, 1);
    device_ops::add_element(store_[c.alpha_res].grad, 0, dalpha, 2);

    DLTensor phi = store_[c.phi].value.view(), dphi = store_[c.phi].grad.view();
    const plx_mhc_proj_rms_backward_args proj{.struct_size = sizeof(plx_mhc_proj_rms_backward_args),
                                              .reserved = 0,
                                              .x = &x,
                                              .phi = &phi,
                                              .dp = &dp_view,
                                              .dr = &dr_view,
                                              .dx = &dx,
                                              .dphi = &dphi};
    backend_.proj_rms_backward(prob, proj, nullptr);
    st.grad = std::move(s.dx);
    s = Saved{};
  }

  const ModelSettings& settings_;
  DLDevice device_;
  ParameterStore& store_;
  ConfigHandle config_;
  MhcBackend backend_;
  std::vector<Around> around_;  // per model unit (decoder units only are filled)
};

}  // namespace

std::unique_ptr<Connection> make_mhc_connection(const PluginHost& host, const ModelSettings& settings,
                                                DLDevice device, ParameterStore& store) {
  return std::make_unique<MhcConnection>(host, settings, device, store);
}

}  // namespace plexus

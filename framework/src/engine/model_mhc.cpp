// The mHC connection around each decoder sublayer (docs/mhc.md): the engine owns the n residual
// streams and calls the four primitives of an "mhc" fusion backend around the layer F:
//   forward:  p, r = proj_rms(x);  H = mappings(p, r);  u = aggregate(x, H_pre);  f = F(u);
//             y = post_res(x, H_res, H_post, f)
//   backward: dx, dH_res, dH_post, df = post_res';  du = F'(df);  dx += aggregate'(du) (and dH_pre);
//             dp, dr = mappings'(dH_*);  dx += proj_rms'(dp, dr)
// The streams are x[t, j, :] for token t = b * S + s; after the embedding every stream is a copy
// of its output, and the final norm reads their mean.
#include <array>
#include <initializer_list>

#include "engine/device_ops.hpp"
#include "engine/model_internal.hpp"

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

struct Sizes {
  int64_t batch, seq, tokens, streams, hidden;
};

Sizes sizes_of(const Model& m, const Model::Run& run) {
  const auto& shape = run.tokens.shape();
  return {shape[0], shape[1], shape[0] * shape[1], m.settings().mhc.streams, m.settings().hidden_size};
}

plx_mhc_problem problem_of(const Model& m, const Sizes& z) {
  const MhcSettings& s = m.settings().mhc;
  plx_mhc_problem p{};
  p.struct_size = sizeof(p);
  p.flags = s.transposed ? PLX_MHC_TRANSPOSED_H_RES : 0u;
  p.num_streams = z.streams;
  p.hidden_size = z.hidden;
  p.num_tokens = z.tokens;
  p.sinkhorn_iterations = s.iterations;
  p.eps = s.eps;
  return p;
}

// The family's two dtypes (mhc.h): mapping tensors (p, r, H and their gradients) are float32;
// activations (the streams x, F's input u and output f, and their gradients) have the model's
// activation dtype (run.precision).
Tensor f32(const Model& m, std::vector<int64_t> shape) {
  return Tensor(std::move(shape), plx_dtype_f32(), m.device());
}
Tensor activation(const Model& m, std::vector<int64_t> shape) {
  return Tensor(std::move(shape), m.settings().activation_dtype, m.device());
}
// For what a primitive WRITES in full (mhc.h: every output but dx and the parameter gradients).
Tensor written_f32(const Model& m, std::vector<int64_t> shape) {
  return Tensor::uninitialized(std::move(shape), plx_dtype_f32(), m.device());
}
Tensor written_activation(const Model& m, std::vector<int64_t> shape) {
  return Tensor::uninitialized(std::move(shape), m.settings().activation_dtype, m.device());
}

}  // namespace

const Tensor& MhcStep::before_forward(Model& m, Model::Run& run, uint32_t u) {
  Model::Unit& unit = *m.units_[u];
  Model::Unit::Mhc& c = *unit.mhc;
  MhcSaved& s = run.mhc[u];
  const Sizes z = sizes_of(m, run);
  const plx_mhc_problem problem = problem_of(m, z);
  const int64_t n = z.streams, width = n * n + 2 * n;
  ParameterStore& params = m.params_;
  // The gates are three parameters (one checkpoint name each); the family takes them as one [3].
  device_ops::copy_element(c.alpha, 0, params[c.alpha_pre].value, 0);
  device_ops::copy_element(c.alpha, 1, params[c.alpha_post].value, 0);
  device_ops::copy_element(c.alpha, 2, params[c.alpha_res].value, 0);

  s.x = std::move(run.stream);
  s.p = written_f32(m, {z.tokens, width});
  s.r = written_f32(m, {z.tokens});
  s.h_pre = written_f32(m, {z.tokens, n});
  s.h_post = written_f32(m, {z.tokens, n});
  s.h_res = written_f32(m, {z.tokens, n, n});
  s.u = written_activation(m, {z.batch, z.seq, z.hidden});
  DLTensor x = s.x.view(), phi = params[c.phi].value.view(), p = s.p.view(), r = s.r.view();
  DLTensor alpha_view = c.alpha.view(), b = params[c.bias].value.view();
  DLTensor h_pre = s.h_pre.view(), h_post = s.h_post.view(), h_res = s.h_res.view();
  Reshaped out(s.u, {z.tokens, z.hidden});
  const plx_mhc_proj_rms_forward_args proj{.struct_size = sizeof(plx_mhc_proj_rms_forward_args),
                                           .reserved = 0,
                                           .x = &x,
                                           .phi = &phi,
                                           .p = &p,
                                           .r = &r};
  m.mhc_backend_->proj_rms_forward(problem, proj, nullptr);
  const plx_mhc_mappings_forward_args maps{.struct_size = sizeof(plx_mhc_mappings_forward_args),
                                           .reserved = 0,
                                           .p = &p,
                                           .r = &r,
                                           .alpha = &alpha_view,
                                           .b = &b,
                                           .h_pre = &h_pre,
                                           .h_post = &h_post,
                                           .h_res = &h_res};
  m.mhc_backend_->mappings_forward(problem, maps, nullptr);
  const plx_mhc_aggregate_forward_args agg{.struct_size = sizeof(plx_mhc_aggregate_forward_args),
                                           .reserved = 0,
                                           .x = &x,
                                           .h_pre = &h_pre,
                                           .u = out.get()};
  m.mhc_backend_->aggregate_forward(problem, agg, nullptr);
  return s.u;
}

void MhcStep::after_forward(Model& m, Model::Run& run, uint32_t u, Tensor f) {
  MhcSaved& s = run.mhc[u];
  const Sizes z = sizes_of(m, run);
  const plx_mhc_problem problem = problem_of(m, z);
  s.f = std::move(f);
  Tensor y = written_activation(m, {z.tokens, z.streams, z.hidden});
  DLTensor x = s.x.view(), h_res = s.h_res.view(), h_post = s.h_post.view(), y_view = y.view();
  Reshaped f_view(s.f, {z.tokens, z.hidden});
  const plx_mhc_post_res_forward_args post{.struct_size = sizeof(plx_mhc_post_res_forward_args),
                                           .reserved = 0,
                                           .x = &x,
                                           .h_res = &h_res,
                                           .h_post = &h_post,
                                           .f = f_view.get(),
                                           .bias = nullptr,
                                           .y = &y_view};
  m.mhc_backend_->post_res_forward(problem, post, nullptr);
  if (const int64_t bad = device_ops::first_non_finite(y); bad >= 0)
    throw NonFiniteError("non-finite value in the mHC streams after " + m.units_[u]->label + " (element " +
                         std::to_string(bad) + ", microbatch " + std::to_string(run.microbatch) +
                         "): the first layer that produced one");
  run.stream = std::move(y);
  if (!run.training) s = MhcSaved{};  // nothing is kept for a backward that will not come
}

const Tensor& MhcStep::before_backward(Model& m, Model::Run& run, uint32_t u) {
  MhcSaved& s = run.mhc[u];
  const Sizes z = sizes_of(m, run);
  const plx_mhc_problem problem = problem_of(m, z);
  const int64_t n = z.streams;
  s.dx = activation(m, {z.tokens, n, z.hidden});  // zeros: three primitives accumulate into it
  s.df = written_activation(m, {z.batch, z.seq, z.hidden});
  s.dh_res = written_f32(m, {z.tokens, n, n});
  s.dh_post = written_f32(m, {z.tokens, n});
  DLTensor x = s.x.view(), h_res = s.h_res.view(), h_post = s.h_post.view(), dy = run.grad.view();
  DLTensor dx = s.dx.view(), dh_res = s.dh_res.view(), dh_post = s.dh_post.view();
  Reshaped f_view(s.f, {z.tokens, z.hidden});
  Reshaped df_view(s.df, {z.tokens, z.hidden});
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
  m.mhc_backend_->post_res_backward(problem, post, nullptr);
  s.f = Tensor();
  return s.df;
}

void MhcStep::after_backward(Model& m, Model::Run& run, uint32_t u, Tensor du) {
  Model::Unit::Mhc& c = *m.units_[u]->mhc;
  MhcSaved& s = run.mhc[u];
  const Sizes z = sizes_of(m, run);
  const plx_mhc_problem problem = problem_of(m, z);
  const int64_t n = z.streams, width = n * n + 2 * n;
  ParameterStore& params = m.params_;
  s.dh_pre = written_f32(m, {z.tokens, n});
  Tensor dp = written_f32(m, {z.tokens, width}), dr = written_f32(m, {z.tokens});
  Tensor dalpha = f32(m, {3});  // accumulated
  DLTensor x = s.x.view(), h_pre = s.h_pre.view(), dx = s.dx.view(), dh_pre = s.dh_pre.view();
  Reshaped du_view(du, {z.tokens, z.hidden});
  const plx_mhc_aggregate_backward_args agg{.struct_size = sizeof(plx_mhc_aggregate_backward_args),
                                            .reserved = 0,
                                            .x = &x,
                                            .h_pre = &h_pre,
                                            .du = du_view.get(),
                                            .dx = &dx,
                                            .dh_pre = &dh_pre};
  m.mhc_backend_->aggregate_backward(problem, agg, nullptr);

  DLTensor p = s.p.view(), r = s.r.view(), alpha = c.alpha.view(), b = params[c.bias].value.view();
  DLTensor dh_post = s.dh_post.view(), dh_res = s.dh_res.view();
  DLTensor dp_view = dp.view(), dr_view = dr.view(), dalpha_view = dalpha.view(),
           db = params[c.bias].grad.view();
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
  m.mhc_backend_->mappings_backward(problem, maps, nullptr);
  // The [3] gradient back into the three gates' gradients (each [1]).
  device_ops::add_element(params[c.alpha_pre].grad, 0, dalpha, 0);
  device_ops::add_element(params[c.alpha_post].grad, 0, dalpha, 1);
  device_ops::add_element(params[c.alpha_res].grad, 0, dalpha, 2);

  DLTensor phi = params[c.phi].value.view(), dphi = params[c.phi].grad.view();
  const plx_mhc_proj_rms_backward_args proj{.struct_size = sizeof(plx_mhc_proj_rms_backward_args),
                                            .reserved = 0,
                                            .x = &x,
                                            .phi = &phi,
                                            .dp = &dp_view,
                                            .dr = &dr_view,
                                            .dx = &dx,
                                            .dphi = &dphi};
  m.mhc_backend_->proj_rms_backward(problem, proj, nullptr);
  run.grad = std::move(s.dx);
  s = MhcSaved{};
}

void MhcStep::expand(Model& m, Model::Run& run, const Tensor& embedded) {
  const Sizes z = sizes_of(m, run);
  run.stream = written_activation(m, {z.tokens, z.streams, z.hidden});
  device_ops::expand_streams(embedded, z.tokens, z.streams, z.hidden, run.stream);
}

Tensor MhcStep::embedding_grad(Model& m, Model::Run& run) {
  const Sizes z = sizes_of(m, run);
  Tensor de = written_activation(m, {z.batch, z.seq, z.hidden});
  device_ops::sum_streams(run.grad, z.tokens, z.streams, z.hidden, de);
  return de;
}

const Tensor& MhcStep::contract(Model& m, Model::Run& run) {
  const Sizes z = sizes_of(m, run);
  run.contracted = written_activation(m, {z.batch, z.seq, z.hidden});
  device_ops::mean_streams(run.stream, z.tokens, z.streams, z.hidden, run.contracted);
  run.stream = Tensor();  // the mean's backward does not need the streams
  return run.contracted;
}

void MhcStep::spread(Model& m, Model::Run& run, const Tensor& grad) {
  const Sizes z = sizes_of(m, run);
  run.grad = written_activation(m, {z.tokens, z.streams, z.hidden});
  device_ops::spread_streams(grad, z.tokens, z.streams, z.hidden, run.grad);
}

}  // namespace plexus

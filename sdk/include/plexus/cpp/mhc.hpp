// Plexus SDK C++ helpers: an "mhc" fusion backend (plexus/mhc.h) as an ordinary class.
//
//   using plexus::sdk::MhcProblem;
//   class MyMhc {
//    public:
//     explicit MyMhc(const plx_fusion_create_args& args);  // may throw plexus::sdk::Error
//     void proj_rms_forward(const MhcProblem&, const plx_mhc_proj_rms_forward_args&, plx_stream);
//     void proj_rms_backward(const MhcProblem&, const plx_mhc_proj_rms_backward_args&, plx_stream);
//     ... likewise mappings_, aggregate_ and post_res_ forward and backward: eight in all
//   };
//   static const plx_fusion_backend_v1 kBackend =
//       plexus::sdk::mhc_backend<MyMhc>(PLX_DEVICE_BIT(kDLCPU));
//   static const plx_component_desc kMyMhc =
//       plexus::sdk::fusion_component("my_mhc", "...", &kBackend);
//   PLEXUS_PLUGIN("my_mhc", "1.0.0", "...", &kMyMhc)
//
// Before a member function runs, its trampoline checks everything mhc.h makes the caller
// responsible for: the problem's values, every tensor's presence, shape, dtype, contiguity, and
// that all are on one device. A violation becomes PLX_ERR_INVALID_ARGUMENT (an unknown flag
// PLX_ERR_UNSUPPORTED) with a message naming the tensor, so every backend built on this helper
// refuses bad calls in the same words. The member gets the validated MhcProblem and checks only
// what its own implementation lacks (a device, a dtype), throwing Error(PLX_ERR_UNSUPPORTED, ...).
// Every call is guarded: no exception crosses the boundary.
#ifndef PLEXUS_CPP_MHC_HPP
#define PLEXUS_CPP_MHC_HPP

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>

#include "plexus/cpp/components.hpp"
#include "plexus/cpp/error.hpp"
#include "plexus/cpp/tensor.hpp"
#include "plexus/mhc.h"

namespace plexus::sdk {

// A validated plx_mhc_problem plus what the call's tensors say.
struct MhcProblem {
  int64_t streams = 0;     // n
  int64_t hidden = 0;      // C
  int64_t tokens = 0;      // T
  int64_t width = 0;       // W = n*n + 2n: mapping logits per token
  int32_t iterations = 0;  // K, Sinkhorn iterations
  double eps = 0;
  bool transposed_h_res = false;
  DLDevice device{};              // every tensor of the call is here
  DLDataType activation_dtype{};  // x's dtype (mappings see no activations: the mapping dtype)
  DLDataType mapping_dtype{};     // float64 with float64 activations, otherwise float32
};

// True when an optional tensor is given: a non-NULL view with non-NULL data. An absent gradient
// output is "not needed"; an absent bias means F has none.
inline bool mhc_given(const DLTensor* t) noexcept {
  return t != nullptr && t->data != nullptr;
}

// A call's tensors as typed pointers, for a backend's member functions (the trampoline has
// already checked their dtypes and contiguity); the _if forms give nullptr for a tensor that is
// not given (mhc_given).
template <class T>
const T* mhc_in(const DLTensor* t) noexcept {
  return static_cast<const T*>(plx_data(t));
}
template <class T>
T* mhc_out(DLTensor* t) noexcept {
  return static_cast<T*>(plx_data(t));
}
template <class T>
const T* mhc_in_if(const DLTensor* t) noexcept {
  return mhc_given(t) ? mhc_in<T>(t) : nullptr;
}
template <class T>
T* mhc_out_if(DLTensor* t) noexcept {
  return mhc_given(t) ? mhc_out<T>(t) : nullptr;
}

namespace detail::mhc {

inline std::string dims_text(const int64_t* dims, int64_t ndim) {
  std::string s = "[";
  for (int64_t i = 0; i < ndim; ++i) s += (i != 0 ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

using plexus::sdk::device_text;

inline std::string number_text(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

[[noreturn]] inline void invalid(const std::string& message) {
  throw Error(PLX_ERR_INVALID_ARGUMENT, message);
}

// a * b, refusing sizes whose element counts do not fit int64.
inline int64_t product(int64_t a, int64_t b, const char* what) {
  if (a != 0 && b > INT64_MAX / a) invalid(std::string("problem: ") + what + " overflows int64");
  return a * b;
}

inline bool is_float_dtype(DLDataType t, uint8_t bits) {
  return plx_dtype_equal(t, plx_dtype(static_cast<uint8_t>(kDLFloat), bits));
}

// The problem's values, without the tensors' dtype and device (filled in by the first tensor).
inline MhcProblem read_problem(const plx_mhc_problem* p) {
  if (p == nullptr) invalid("problem: NULL");
  if (p->struct_size < PLX_FIELD_END(plx_mhc_problem, eps))
    invalid("problem: struct_size " + std::to_string(p->struct_size) + " is smaller than the 1.0 layout (" +
            std::to_string(PLX_FIELD_END(plx_mhc_problem, eps)) + " bytes)");
  if (p->num_streams < 1)
    invalid("problem: num_streams (n) must be >= 1, got " + std::to_string(p->num_streams));
  if (p->hidden_size < 1)
    invalid("problem: hidden_size (C) must be >= 1, got " + std::to_string(p->hidden_size));
  if (p->num_tokens < 0)
    invalid("problem: num_tokens (T) must be >= 0, got " + std::to_string(p->num_tokens));
  if (p->sinkhorn_iterations < 1)
    invalid("problem: sinkhorn_iterations (K) must be >= 1, got " + std::to_string(p->sinkhorn_iterations));
  if (!(std::isfinite(p->eps) && p->eps > 0))  // also refuses NaN
    invalid("problem: eps must be a finite number > 0, got " + number_text(p->eps));
  const uint32_t unknown = p->flags & ~static_cast<uint32_t>(PLX_MHC_KNOWN_FLAGS_V1);
  if (unknown != 0)
    throw Error(PLX_ERR_UNSUPPORTED, "problem: unknown flag bits " + std::to_string(unknown) +
                                         " (this backend knows PLX_MHC_TRANSPOSED_H_RES = 1)");
  MhcProblem out;
  out.streams = p->num_streams;
  out.hidden = p->hidden_size;
  out.tokens = p->num_tokens;
  const int64_t n_squared = product(out.streams, out.streams, "n * n");
  if (n_squared > INT64_MAX - 2 * out.streams) invalid("problem: n * n + 2n overflows int64");
  out.width = n_squared + 2 * out.streams;
  // The element counts of the largest tensors must fit too (results unused: only checked).
  product(product(out.tokens, out.streams, "T * n"), out.hidden, "T * n * C");
  product(product(out.streams, out.hidden, "n * C"), out.width, "n * C * W");
  product(out.tokens, out.width, "T * W");
  out.iterations = p->sinkhorn_iterations;
  out.eps = p->eps;
  out.transposed_h_res = (p->flags & PLX_MHC_TRANSPOSED_H_RES) != 0;
  return out;
}

template <class Args>
const Args& read_args(const Args* args, std::size_t v1_size) {
  if (args == nullptr) invalid("args: NULL");
  if (args->struct_size < v1_size)
    invalid("args: struct_size " + std::to_string(args->struct_size) + " is smaller than the 1.0 layout (" +
            std::to_string(v1_size) + " bytes)");
  return *args;
}

// Checks the tensors of one call against the problem. The first one checked, the "source" (x, or
// p for mappings), fixes the call's device and dtypes; the others must agree with it.
class Checker {
 public:
  enum class Dtype { activation, mapping };

  explicit Checker(MhcProblem& problem) : problem_(problem) {}

  // The activation tensor that fixes the dtypes: float32, float64 or bfloat16.
  void activation_source(const DLTensor* t, const char* name, std::initializer_list<int64_t> shape) {
    present(t, name);
    const DLDataType d = t->dtype;
    if (!is_float_dtype(d, 32) && !is_float_dtype(d, 64) && !plx_dtype_equal(d, plx_dtype_bf16()))
      invalid(std::string(name) + ": dtype " + dtype_name(d) +
              " is not an mhc activation dtype (float32, float64 or bfloat16)");
    problem_.activation_dtype = d;
    problem_.mapping_dtype = is_float_dtype(d, 64) ? plx_dtype_f64() : plx_dtype_f32();
    problem_.device = t->device;
    eps_fits_mapping_dtype();
    layout(*t, name, Dtype::activation, shape);
  }
  // The mapping tensor that fixes the dtypes when no activation is involved: float32 or float64.
  void mapping_source(const DLTensor* t, const char* name, std::initializer_list<int64_t> shape) {
    present(t, name);
    if (!is_float_dtype(t->dtype, 32) && !is_float_dtype(t->dtype, 64))
      invalid(std::string(name) + ": dtype " + dtype_name(t->dtype) +
              " is not an mhc mapping dtype (float32 or float64)");
    problem_.activation_dtype = problem_.mapping_dtype = t->dtype;
    problem_.device = t->device;
    eps_fits_mapping_dtype();
    layout(*t, name, Dtype::mapping, shape);
  }
  void required(const DLTensor* t, const char* name, Dtype dtype, std::initializer_list<int64_t> shape) {
    present(t, name);
    layout(*t, name, dtype, shape);
  }
  // An optional tensor is checked only when given (see mhc_given).
  void optional(const DLTensor* t, const char* name, Dtype dtype, std::initializer_list<int64_t> shape) {
    if (mhc_given(t)) layout(*t, name, dtype, shape);
  }

 private:
  // The clamps divide by eps in the mapping dtype: an eps that float32 rounds to zero (or to a
  // denormal) would divide by zero there.
  void eps_fits_mapping_dtype() const {
    if (is_float_dtype(problem_.mapping_dtype, 32) && problem_.eps < static_cast<double>(FLT_MIN))
      invalid("problem: eps = " + number_text(problem_.eps) +
              " is below float32's smallest normal number, and the mapping dtype of this call is float32");
  }
  void present(const DLTensor* t, const char* name) const {
    if (t == nullptr) invalid(std::string(name) + ": NULL, but it is required");
  }
  void layout(const DLTensor& t, const char* name, Dtype dtype, std::initializer_list<int64_t> shape) const {
    const bool same_shape = t.ndim == static_cast<int32_t>(shape.size()) && t.shape != nullptr &&
                            std::equal(shape.begin(), shape.end(), t.shape);
    if (!same_shape)
      invalid(std::string(name) + ": expected shape " +
              dims_text(shape.begin(), static_cast<int64_t>(shape.size())) + ", got " +
              (t.shape != nullptr ? dims_text(t.shape, t.ndim) : "no shape") +
              " (n = " + std::to_string(problem_.streams) + ", C = " + std::to_string(problem_.hidden) +
              ", T = " + std::to_string(problem_.tokens) + ")");
    const DLDataType expected =
        dtype == Dtype::activation ? problem_.activation_dtype : problem_.mapping_dtype;
    if (!plx_dtype_equal(t.dtype, expected))
      invalid(std::string(name) + ": expected dtype " + dtype_name(expected) + " (the " +
              (dtype == Dtype::activation ? "activation" : "mapping") + " dtype of this call), got " +
              dtype_name(t.dtype));
    if (t.device.device_type != problem_.device.device_type ||
        t.device.device_id != problem_.device.device_id)
      invalid(std::string(name) + ": on " + device_text(t.device) + ", but the call's other tensors are on " +
              device_text(problem_.device) + " (all tensors of a call must be on one device)");
    if (!plx_is_contiguous(&t)) invalid(std::string(name) + ": not row-major contiguous");
    if (t.data == nullptr && plx_numel(&t) != 0)
      invalid(std::string(name) + ": data is NULL, but it is required");
  }

  MhcProblem& problem_;
};

using D = Checker::Dtype;

// ---- the contract of each function (mhc.h's shape table) ----

inline MhcProblem check(const plx_mhc_problem* problem, const plx_mhc_proj_rms_forward_args& a) {
  MhcProblem p = read_problem(problem);
  Checker c(p);
  c.activation_source(a.x, "x", {p.tokens, p.streams, p.hidden});
  c.required(a.phi, "phi", D::mapping, {p.streams * p.hidden, p.width});
  c.required(a.p, "p", D::mapping, {p.tokens, p.width});
  c.required(a.r, "r", D::mapping, {p.tokens});
  return p;
}

inline MhcProblem check(const plx_mhc_problem* problem, const plx_mhc_proj_rms_backward_args& a) {
  MhcProblem p = read_problem(problem);
  Checker c(p);
  c.activation_source(a.x, "x", {p.tokens, p.streams, p.hidden});
  c.required(a.phi, "phi", D::mapping, {p.streams * p.hidden, p.width});
  c.required(a.dp, "dp", D::mapping, {p.tokens, p.width});
  c.required(a.dr, "dr", D::mapping, {p.tokens});
  c.optional(a.dx, "dx", D::activation, {p.tokens, p.streams, p.hidden});
  c.optional(a.dphi, "dphi", D::mapping, {p.streams * p.hidden, p.width});
  return p;
}

inline MhcProblem check(const plx_mhc_problem* problem, const plx_mhc_mappings_forward_args& a) {
  MhcProblem p = read_problem(problem);
  Checker c(p);
  c.mapping_source(a.p, "p", {p.tokens, p.width});
  c.required(a.r, "r", D::mapping, {p.tokens});
  c.required(a.alpha, "alpha", D::mapping, {3});
  c.required(a.b, "b", D::mapping, {p.width});
  c.required(a.h_pre, "h_pre", D::mapping, {p.tokens, p.streams});
  c.required(a.h_post, "h_post", D::mapping, {p.tokens, p.streams});
  c.required(a.h_res, "h_res", D::mapping, {p.tokens, p.streams, p.streams});
  return p;
}

inline MhcProblem check(const plx_mhc_problem* problem, const plx_mhc_mappings_backward_args& a) {
  MhcProblem p = read_problem(problem);
  Checker c(p);
  c.mapping_source(a.p, "p", {p.tokens, p.width});
  c.required(a.r, "r", D::mapping, {p.tokens});
  c.required(a.alpha, "alpha", D::mapping, {3});
  c.required(a.b, "b", D::mapping, {p.width});
  c.required(a.dh_pre, "dh_pre", D::mapping, {p.tokens, p.streams});
  c.required(a.dh_post, "dh_post", D::mapping, {p.tokens, p.streams});
  c.required(a.dh_res, "dh_res", D::mapping, {p.tokens, p.streams, p.streams});
  c.optional(a.dp, "dp", D::mapping, {p.tokens, p.width});
  c.optional(a.dr, "dr", D::mapping, {p.tokens});
  c.optional(a.dalpha, "dalpha", D::mapping, {3});
  c.optional(a.db, "db", D::mapping, {p.width});
  return p;
}

inline MhcProblem check(const plx_mhc_problem* problem, const plx_mhc_aggregate_forward_args& a) {
  MhcProblem p = read_problem(problem);
  Checker c(p);
  c.activation_source(a.x, "x", {p.tokens, p.streams, p.hidden});
  c.required(a.h_pre, "h_pre", D::mapping, {p.tokens, p.streams});
  c.required(a.u, "u", D::activation, {p.tokens, p.hidden});
  return p;
}

inline MhcProblem check(const plx_mhc_problem* problem, const plx_mhc_aggregate_backward_args& a) {
  MhcProblem p = read_problem(problem);
  Checker c(p);
  c.activation_source(a.x, "x", {p.tokens, p.streams, p.hidden});
  c.required(a.h_pre, "h_pre", D::mapping, {p.tokens, p.streams});
  c.required(a.du, "du", D::activation, {p.tokens, p.hidden});
  c.optional(a.dx, "dx", D::activation, {p.tokens, p.streams, p.hidden});
  c.optional(a.dh_pre, "dh_pre", D::mapping, {p.tokens, p.streams});
  return p;
}

inline MhcProblem check(const plx_mhc_problem* problem, const plx_mhc_post_res_forward_args& a) {
  MhcProblem p = read_problem(problem);
  Checker c(p);
  c.activation_source(a.x, "x", {p.tokens, p.streams, p.hidden});
  c.required(a.h_res, "h_res", D::mapping, {p.tokens, p.streams, p.streams});
  c.required(a.h_post, "h_post", D::mapping, {p.tokens, p.streams});
  c.required(a.f, "f", D::activation, {p.tokens, p.hidden});
  c.optional(a.bias, "bias", D::activation, {p.hidden});
  c.required(a.y, "y", D::activation, {p.tokens, p.streams, p.hidden});
  return p;
}

inline MhcProblem check(const plx_mhc_problem* problem, const plx_mhc_post_res_backward_args& a) {
  MhcProblem p = read_problem(problem);
  Checker c(p);
  c.activation_source(a.x, "x", {p.tokens, p.streams, p.hidden});
  c.required(a.h_res, "h_res", D::mapping, {p.tokens, p.streams, p.streams});
  c.required(a.h_post, "h_post", D::mapping, {p.tokens, p.streams});
  c.required(a.f, "f", D::activation, {p.tokens, p.hidden});
  c.optional(a.bias, "bias", D::activation, {p.hidden});
  c.required(a.dy, "dy", D::activation, {p.tokens, p.streams, p.hidden});
  c.optional(a.dx, "dx", D::activation, {p.tokens, p.streams, p.hidden});
  c.optional(a.dh_res, "dh_res", D::mapping, {p.tokens, p.streams, p.streams});
  c.optional(a.dh_post, "dh_post", D::mapping, {p.tokens, p.streams});
  c.optional(a.df, "df", D::activation, {p.tokens, p.hidden});
  c.optional(a.dbias, "dbias", D::activation, {p.hidden});
  return p;
}

// One trampoline per table entry: check the contract, then call the backend's member function.
template <class T, class Args, auto Member, std::size_t V1Size>
plx_status call(const char* operation, void* instance, const plx_mhc_problem* problem, const Args* args,
                plx_stream stream) noexcept {
  return guard(operation, [&] {
    if (instance == nullptr)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "instance: NULL (create the backend first)");
    const Args& a = read_args(args, V1Size);
    const MhcProblem p = check(problem, a);
    (static_cast<T*>(instance)->*Member)(p, a, stream);
  });
}

template <class T>
struct MhcTrampolines {
#define PLX_MHC_TRAMPOLINE(fn, args_type, last_field)                                                      \
  static plx_status fn(void* instance, const plx_mhc_problem* problem, const args_type* args,              \
                       plx_stream stream) noexcept {                                                       \
    return call<T, args_type, &T::fn, PLX_FIELD_END(args_type, last_field)>("mhc." #fn, instance, problem, \
                                                                            args, stream);                 \
  }
  PLX_MHC_TRAMPOLINE(proj_rms_forward, plx_mhc_proj_rms_forward_args, r)
  PLX_MHC_TRAMPOLINE(proj_rms_backward, plx_mhc_proj_rms_backward_args, dphi)
  PLX_MHC_TRAMPOLINE(mappings_forward, plx_mhc_mappings_forward_args, h_res)
  PLX_MHC_TRAMPOLINE(mappings_backward, plx_mhc_mappings_backward_args, db)
  PLX_MHC_TRAMPOLINE(aggregate_forward, plx_mhc_aggregate_forward_args, u)
  PLX_MHC_TRAMPOLINE(aggregate_backward, plx_mhc_aggregate_backward_args, dh_pre)
  PLX_MHC_TRAMPOLINE(post_res_forward, plx_mhc_post_res_forward_args, y)
  PLX_MHC_TRAMPOLINE(post_res_backward, plx_mhc_post_res_backward_args, dbias)
#undef PLX_MHC_TRAMPOLINE

  static inline const plx_mhc_v1 table = {sizeof(plx_mhc_v1), 0,
                                          &proj_rms_forward,  &proj_rms_backward,
                                          &mappings_forward,  &mappings_backward,
                                          &aggregate_forward, &aggregate_backward,
                                          &post_res_forward,  &post_res_backward};
};

}  // namespace detail::mhc

// The family table for backend class T (one per T, static storage).
template <class T>
const plx_mhc_v1* mhc_table() noexcept {
  return &detail::mhc::MhcTrampolines<T>::table;
}

// The fusion-backend table of an mhc backend T running on the devices of `device_mask`
// (PLX_DEVICE_BIT(kDLCPU) | ...). T is constructed from plx_fusion_create_args, once per device.
template <class T>
plx_fusion_backend_v1 mhc_backend(uint64_t device_mask) {
  return fusion_backend<T>(PLX_MHC_FAMILY, PLX_MHC_VERSION, device_mask, mhc_table<T>());
}

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_MHC_HPP

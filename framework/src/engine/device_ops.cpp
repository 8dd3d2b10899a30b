#include "engine/device_ops.hpp"

#include <stdexcept>
#include <string>

#include "engine/device_ops_cuda.hpp"
#include "plexus/core/device.hpp"
#include "plexus/tensor.h"

namespace plexus::device_ops {
namespace {

bool on_cpu(const Tensor& t) {
  return t.device().device_type == kDLCPU;
}

void same_place(const Tensor& a, const Tensor& b, const char* what) {
  if (a.device().device_type != b.device().device_type || a.device().device_id != b.device().device_id)
    throw std::logic_error(std::string(what) + ": tensors on " + device::name(a.device()) + " and " +
                           device::name(b.device()));
  if (!plx_dtype_equal(a.dtype(), b.dtype()))
    throw std::logic_error(std::string(what) + ": tensors of dtypes " + dtype_name(a.dtype()) + " and " +
                           dtype_name(b.dtype()));
}

bool is_f32(const Tensor& t) {
  return plx_dtype_equal(t.dtype(), plx_dtype_f32());
}

// Activations are float32 on the CPU (run.precision "bf16" is refused there); float32 or
// bfloat16 on a GPU, where the CUDA side dispatches on the dtype.
bool on_cpu_f32(const Tensor& t, const char* what) {
  if (!on_cpu(t)) return false;
  if (!is_f32(t))
    throw std::logic_error(std::string(what) + ": a " + dtype_name(t.dtype()) +
                           " tensor on the CPU, where the engine computes in float32");
  return true;
}

}  // namespace

void add_into(Tensor& into, const Tensor& from) {
  same_place(into, from, "add_into");
  if (on_cpu_f32(into, "add_into"))
    vector_ops::add_into(into.data<float>(), from.data<float>(), into.numel());
  else
    cuda::add_into(into, from);
}

int64_t first_non_finite(const Tensor& t) {
  if (on_cpu(t)) return is_f32(t) ? vector_ops::first_non_finite(t.data<float>(), t.numel()) : -1;
  const bool checked = is_f32(t) || plx_dtype_equal(t.dtype(), plx_dtype_bf16());
  return checked ? cuda::first_non_finite(t) : -1;
}

std::vector<int64_t> first_non_finite_each(const std::vector<const Tensor*>& tensors) {
  if (!tensors.empty() && !on_cpu(*tensors.front())) return cuda::first_non_finite_each(tensors);
  std::vector<int64_t> first;
  first.reserve(tensors.size());
  for (const Tensor* t : tensors) first.push_back(first_non_finite(*t));
  return first;
}

double sum_of_squares(const std::vector<const Tensor*>& tensors) {
  if (tensors.empty()) return 0;
  if (!on_cpu(*tensors.front())) return cuda::sum_of_squares(tensors);
  double sum = 0;
  for (const Tensor* t : tensors) sum += vector_ops::sum_of_squares(t->data<float>(), t->numel());
  return sum;
}

void adamw_update(const vector_ops::AdamWStep& step, Tensor& weight, const Tensor& grad, Tensor& exp_avg,
                  Tensor& exp_avg_sq) {
  same_place(weight, grad, "adamw_update");
  if (on_cpu(weight))
    vector_ops::adamw_update(step, weight.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                             exp_avg_sq.data<float>(), weight.numel());
  else
    cuda::adamw_update(step, weight, grad, exp_avg, exp_avg_sq);
}

void expand_streams(const Tensor& e, int64_t tokens, int64_t streams, int64_t hidden, Tensor& x) {
  same_place(e, x, "expand_streams");
  if (on_cpu_f32(x, "expand_streams"))
    vector_ops::expand_streams(e.data<float>(), tokens, streams, hidden, x.data<float>());
  else
    cuda::expand_streams(e, tokens, streams, hidden, x);
}

void sum_streams(const Tensor& dx, int64_t tokens, int64_t streams, int64_t hidden, Tensor& de) {
  same_place(dx, de, "sum_streams");
  if (on_cpu_f32(de, "sum_streams"))
    vector_ops::sum_streams(dx.data<float>(), tokens, streams, hidden, de.data<float>());
  else
    cuda::reduce_streams(dx, tokens, streams, hidden, 1.0f, de);
}

void mean_streams(const Tensor& x, int64_t tokens, int64_t streams, int64_t hidden, Tensor& h) {
  same_place(x, h, "mean_streams");
  if (on_cpu_f32(h, "mean_streams"))
    vector_ops::mean_streams(x.data<float>(), tokens, streams, hidden, h.data<float>());
  else
    cuda::reduce_streams(x, tokens, streams, hidden, 1.0f / static_cast<float>(streams), h);
}

void spread_streams(const Tensor& dh, int64_t tokens, int64_t streams, int64_t hidden, Tensor& dx) {
  same_place(dh, dx, "spread_streams");
  if (on_cpu_f32(dx, "spread_streams"))
    vector_ops::spread_streams(dh.data<float>(), tokens, streams, hidden, dx.data<float>());
  else
    cuda::spread_streams(dh, tokens, streams, hidden, dx);
}

float read_scalar(const Tensor& t) {
  float value = 0;
  device::copy(&value, DLDevice{kDLCPU, 0}, t.raw(), t.device(), sizeof(float));
  return value;
}

void copy_element(Tensor& dst, int64_t i, const Tensor& src, int64_t j) {
  same_place(dst, src, "copy_element");
  device::copy(dst.data<float>() + i, dst.device(), src.data<float>() + j, src.device(), sizeof(float));
}

void add_element(Tensor& dst, int64_t i, const Tensor& src, int64_t j) {
  same_place(dst, src, "add_element");
  if (on_cpu(dst))
    dst.data<float>()[i] += src.data<float>()[j];
  else
    cuda::add_element(dst, i, src, j);
}

void write_floats(Tensor& t, const float* values, int64_t n) {
  device::copy(t.raw(), t.device(), values, DLDevice{kDLCPU, 0}, static_cast<std::size_t>(n) * sizeof(float));
}

}  // namespace plexus::device_ops

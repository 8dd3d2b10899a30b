#include "checks.hpp"

#include "plexus/cpp/error.hpp"
#include "plexus/cpp/tensor.hpp"

namespace plexus::moe {

using plexus::sdk::Error;

std::string shape_string(const int64_t* dims, int64_t ndim) {
  std::string s = "[";
  for (int64_t i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

Precision precision_of(DLDataType dtype, const std::string& what) {
  if (plx_dtype_equal(dtype, plx_dtype_f32())) return Precision::f32;
  if (plx_dtype_equal(dtype, plx_dtype_f64())) return Precision::f64;
  throw Error(PLX_ERR_INVALID_ARGUMENT,
              what + ": expected dtype float32 or float64, got " + plexus::sdk::dtype_name(dtype));
}

namespace {
void expect_dense(const DLTensor& t, DLDataType dtype, const std::string& what) {
  if (t.data == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": no data (null pointer)");
  if (t.device.device_type != kDLCPU)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                what + ": expected a tensor on the CPU (the layer's device), got one on " +
                    plexus::sdk::device_text(t.device));
  if (!plx_dtype_equal(t.dtype, dtype))
    throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected dtype " + plexus::sdk::dtype_name(dtype) +
                                              ", got " + plexus::sdk::dtype_name(t.dtype));
  if (!plx_is_contiguous(&t)) throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected a contiguous tensor");
}
}  // namespace

void expect_tensor(const DLTensor& t, DLDataType dtype, const int64_t* dims, int64_t ndim,
                   const std::string& what) {
  expect_dense(t, dtype, what);
  bool same = t.ndim == ndim;
  for (int32_t i = 0; same && i < t.ndim; ++i) same = t.shape[i] == dims[i];
  if (!same)
    throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected shape " + shape_string(dims, ndim) + ", got " +
                                              shape_string(t.shape, t.ndim));
}

void expect_tensor(const DLTensor& t, DLDataType dtype, std::initializer_list<int64_t> dims,
                   const std::string& what) {
  expect_tensor(t, dtype, dims.begin(), static_cast<int64_t>(dims.size()), what);
}

void expect_hidden(const DLTensor& t, DLDataType dtype, int64_t hidden, const std::string& what,
                   int64_t& batch, int64_t& seq) {
  expect_dense(t, dtype, what);
  if (t.ndim != 3 || t.shape[2] != hidden)
    throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected shape [batch, seq, " + std::to_string(hidden) +
                                              "] (hidden_size " + std::to_string(hidden) + "), got " +
                                              shape_string(t.shape, t.ndim));
  batch = t.shape[0];
  seq = t.shape[1];
}

void expect_hidden_desc(const plx_tensor_desc& d, int64_t hidden, const std::string& what) {
  precision_of(d.dtype, what);
  if (d.ndim != 3 || d.dims[2] != hidden)
    throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected shape [batch, seq, " + std::to_string(hidden) +
                                              "], got " + shape_string(d.dims, d.ndim));
}

}  // namespace plexus::moe

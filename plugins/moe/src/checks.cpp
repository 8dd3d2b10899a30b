#include "checks.hpp"

#include "plexus/cpp/error.hpp"
#include "plexus/cpp/tensor.hpp"

namespace plexus::moe {

using plexus::sdk::Error;


Precision precision_of(DLDataType dtype, const std::string& what) {
  if (plx_dtype_equal(dtype, plx_dtype_f32())) return Precision::f32;
  if (plx_dtype_equal(dtype, plx_dtype_f64())) return Precision::f64;
  throw Error(PLX_ERR_INVALID_ARGUMENT,
              what + ": expected dtype float32 or float64, got " + plexus::sdk::dtype_name(dtype));
}

void expect_hidden(const DLTensor& t, DLDevice device, DLDataType dtype, int64_t hidden, const std::string& what,
                   int64_t& batch, int64_t& seq) {
  sdk::expect_dense(t, device, dtype, what);
  if (t.ndim != 3 || t.shape[2] != hidden)
    throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected shape [batch, seq, " + std::to_string(hidden) +
                                              "] (hidden_size " + std::to_string(hidden) + "), got " +
                                              shape_text(t.shape, t.ndim));
  batch = t.shape[0];
  seq = t.shape[1];
}

void expect_hidden_desc(const plx_tensor_desc& d, int64_t hidden, const std::string& what) {
  precision_of(d.dtype, what);
  if (d.ndim != 3 || d.dims[2] != hidden)
    throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected shape [batch, seq, " + std::to_string(hidden) +
                                              "], got " + shape_text(d.dims, d.ndim));
}

}  // namespace plexus::moe

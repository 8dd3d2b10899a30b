// Plexus SDK C++ helpers: checked, typed access to DLPack tensor views.
#ifndef PLEXUS_CPP_TENSOR_HPP
#define PLEXUS_CPP_TENSOR_HPP

#include <cstdint>
#include <initializer_list>
#include <string>

#include "plexus/cpp/error.hpp"
#include "plexus/tensor.h"

namespace plexus::sdk {

inline std::string dtype_name(DLDataType t) {
  std::string base;
  switch (t.code) {
    case kDLFloat: base = "float"; break;
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLBfloat: base = "bfloat"; break;
    default: base = "dtype" + std::to_string(t.code) + "_"; break;
  }
  return base + std::to_string(t.bits);
}

// Throws Error naming `what` unless t is contiguous on the CPU with the expected dtype.
inline void expect_cpu_contiguous(const DLTensor& t, DLDataType dtype, const char* what) {
  if (t.device.device_type != kDLCPU)
    throw Error(PLX_ERR_UNSUPPORTED, std::string(what) + ": expected a CPU tensor");
  if (!plx_dtype_equal(t.dtype, dtype))
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(what) + ": expected dtype " + dtype_name(dtype) +
                                              ", got " + dtype_name(t.dtype));
  if (!plx_is_contiguous(&t))
    throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(what) + ": expected a contiguous tensor");
}

// "cpu:0", "cuda:1", "device type 7:0": a device as messages name it.
inline std::string device_text(DLDevice d) {
  const std::string type = d.device_type == kDLCPU    ? std::string("cpu")
                           : d.device_type == kDLCUDA ? std::string("cuda")
                                                      : "device type " + std::to_string(d.device_type);
  return type + ":" + std::to_string(d.device_id);
}

// "[2, 3, 4]": a shape as messages write it.
inline std::string shape_text(const int64_t* dims, int64_t ndim) {
  std::string s = "[";
  for (int64_t i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}
inline std::string shape_text(const DLTensor& t) {
  return shape_text(t.shape, t.ndim);
}
inline std::string shape_text(std::initializer_list<int64_t> dims) {
  return shape_text(dims.begin(), static_cast<int64_t>(dims.size()));
}

// Throws Error(PLX_ERR_INVALID_ARGUMENT) naming `what` unless t has data, lives on `device` (a
// layer's device: the CPU whatever the id, a GPU by its id; both devices are named otherwise),
// has `dtype` and is contiguous.
inline void expect_dense(const DLTensor& t, DLDevice device, DLDataType dtype, const std::string& what) {
  if (t.data == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": no data (null pointer)");
  const bool same_device = t.device.device_type == device.device_type &&
                           (device.device_type == kDLCPU || t.device.device_id == device.device_id);
  if (!same_device)
    throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected a tensor on " + device_text(device) +
                                              " (the layer's device), got one on " + device_text(t.device));
  if (!plx_dtype_equal(t.dtype, dtype))
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                what + ": expected dtype " + dtype_name(dtype) + ", got " + dtype_name(t.dtype));
  if (!plx_is_contiguous(&t)) throw Error(PLX_ERR_INVALID_ARGUMENT, what + ": expected a contiguous tensor");
}

// expect_dense, and the shape dims[0 .. ndim).
inline void expect_tensor(const DLTensor& t, DLDevice device, DLDataType dtype, const int64_t* dims, int64_t ndim,
                          const std::string& what) {
  expect_dense(t, device, dtype, what);
  bool same = t.ndim == ndim;
  for (int32_t i = 0; same && i < t.ndim; ++i) same = t.shape[i] == dims[i];
  if (!same)
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                what + ": expected shape " + shape_text(dims, ndim) + ", got " + shape_text(t));
}
inline void expect_tensor(const DLTensor& t, DLDevice device, DLDataType dtype, std::initializer_list<int64_t> dims,
                          const std::string& what) {
  expect_tensor(t, device, dtype, dims.begin(), static_cast<int64_t>(dims.size()), what);
}

template <class T>
T* data_as(const DLTensor& t) {
  return static_cast<T*>(plx_data(&t));
}

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_TENSOR_HPP

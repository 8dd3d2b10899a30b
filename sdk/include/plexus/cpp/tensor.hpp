// Plexus SDK C++ helpers: checked, typed access to DLPack tensor views.
#ifndef PLEXUS_CPP_TENSOR_HPP
#define PLEXUS_CPP_TENSOR_HPP

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

template <class T>
T* data_as(const DLTensor& t) {
  return static_cast<T*>(plx_data(&t));
}

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_TENSOR_HPP

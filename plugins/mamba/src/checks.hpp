// The checks every call of mamba.mixer makes on the tensors it is handed: dtype, device (the
// layer's: the CPU or its GPU), layout and shape, each refusal naming the tensor and what was
// expected. The CPU and the CUDA path are checked by the same code (mixer_layer.cpp).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "plexus/cpp/tensor.hpp"
#include "plexus/layer.h"

namespace plexus::mamba {

enum class Precision { f32, f64 };

inline DLDataType dtype_of(Precision p) {
  return p == Precision::f32 ? plx_dtype_f32() : plx_dtype_f64();
}
template <class T>
constexpr Precision precision_v = sizeof(T) == 4 ? Precision::f32 : Precision::f64;


// float32 or float64, else an Error naming `what` and the dtype it has.
Precision precision_of(DLDataType dtype, const std::string& what);
// The precision of activations on `device`: precision_of on the CPU; on a CUDA device float32
// only (float64 and bfloat16 are refused naming `what`, the dtype and the component).
Precision precision_on(DLDevice device, DLDataType dtype, const std::string& what);

// Shapes in messages and the tensor checks: the SDK's (plexus/cpp/tensor.hpp).
using plexus::sdk::expect_tensor;
using plexus::sdk::shape_text;

// Hidden states [batch, seq, hidden] on `device` in `dtype`: returns batch and seq.
void expect_hidden(const DLTensor& t, DLDevice device, DLDataType dtype, int64_t hidden,
                   const std::string& what, int64_t& batch, int64_t& seq);
// The description of hidden states on `device`: a dtype precision_on accepts, [batch, seq, hidden].
void expect_hidden_desc(const plx_tensor_desc& d, DLDevice device, int64_t hidden, const std::string& what);

template <class T>
T* data(const DLTensor& t) {
  return static_cast<T*>(plx_data(&t));
}

}  // namespace plexus::mamba

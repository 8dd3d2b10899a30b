// The checks every call of moe.layer makes on the tensors it is handed: dtype, device (the layer's),
// layout and shape, each refusal naming the tensor and what was expected.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "plexus/cpp/tensor.hpp"
#include "plexus/layer.h"

namespace plexus::moe {

enum class Precision { f32, f64 };

inline DLDataType dtype_of(Precision p) {
  return p == Precision::f32 ? plx_dtype_f32() : plx_dtype_f64();
}
template <class T>
constexpr Precision precision_v = sizeof(T) == 4 ? Precision::f32 : Precision::f64;


// float32 or float64, else an Error naming `what` and the dtype it has.
Precision precision_of(DLDataType dtype, const std::string& what);

// Shapes in messages, and a contiguous CPU tensor with data, of this dtype and shape (else an
// Error naming `what`): the SDK's checks (plexus/cpp/tensor.hpp) on the layer's device.
using plexus::sdk::shape_text;
inline constexpr DLDevice kCpu{kDLCPU, 0};
inline void expect_tensor(const DLTensor& t, DLDataType dtype, std::initializer_list<int64_t> dims,
                          const std::string& what) {
  plexus::sdk::expect_tensor(t, kCpu, dtype, dims, what);
}
inline void expect_tensor(const DLTensor& t, DLDataType dtype, const int64_t* dims, int64_t ndim,
                          const std::string& what) {
  plexus::sdk::expect_tensor(t, kCpu, dtype, dims, ndim, what);
}

// The same on the layer's device (the CPU, or the CUDA device it was created on).
inline void expect_tensor(const DLTensor& t, DLDevice device, DLDataType dtype, std::initializer_list<int64_t> dims,
                          const std::string& what) {
  plexus::sdk::expect_tensor(t, device, dtype, dims, what);
}
inline void expect_tensor(const DLTensor& t, DLDevice device, DLDataType dtype, const int64_t* dims, int64_t ndim,
                          const std::string& what) {
  plexus::sdk::expect_tensor(t, device, dtype, dims, ndim, what);
}

// Hidden states [batch, seq, hidden] on `device` in `dtype`: returns batch and seq.
void expect_hidden(const DLTensor& t, DLDevice device, DLDataType dtype, int64_t hidden, const std::string& what,
                   int64_t& batch, int64_t& seq);
// The description of hidden states: float32 or float64, [batch, seq, hidden].
void expect_hidden_desc(const plx_tensor_desc& d, int64_t hidden, const std::string& what);

template <class T>
T* data(const DLTensor& t) {
  return static_cast<T*>(plx_data(&t));
}

}  // namespace plexus::moe

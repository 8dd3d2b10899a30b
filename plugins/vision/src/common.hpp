// Shared by the vision layers: reading options and the model section, the refusals every layer
// makes (a device other than the CPU), dtype dispatch, tensor
// checks and a base class answering info(), param() and stage().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "plexus/cpp/host.hpp"
#include "plexus/cpp/layer.hpp"
#include "plexus/cpp/tensor.hpp"
#include "plexus/plugin.h"

namespace plexus::vision {

using plexus::sdk::Error;
using plexus::sdk::expect_tensor;
using plexus::sdk::shape_text;

// ---- configuration ----

// model.<key>, an integer >= 1; the error names the component, the key and the value.
int64_t model_positive_int(const plexus::sdk::Host& host, plx_config model, const char* key,
                           const char* component);
// model.<key>, a finite number > 0.
double model_positive_number(const plexus::sdk::Host& host, plx_config model, const char* key,
                             const char* component);
// The component's option <key> (an integer, `fallback` when absent or when there is no options
// node), at least `minimum`; the error names the component, the option and the value.
int64_t option_int(const plexus::sdk::Host& host, plx_config options, const char* key, int64_t fallback,
                   int64_t minimum, const char* component);

// ---- dtypes ----

enum class Precision { f32, f64 };
inline DLDataType dtype_of(Precision p) {
  return p == Precision::f32 ? plx_dtype_f32() : plx_dtype_f64();
}
inline const char* precision_name(Precision p) {
  return p == Precision::f32 ? "float32" : "float64";
}
template <class T>
constexpr Precision precision_v = sizeof(T) == 4 ? Precision::f32 : Precision::f64;

// The floating precision of a dtype; anything but float32 / float64 (bfloat16 included: the CPU
// path has no bf16 arithmetic) is refused naming the component and `what`.
Precision precision_of(DLDataType dtype, const char* component, const std::string& what);

template <class T>
T* data(const DLTensor& t) {
  return static_cast<T*>(plx_data(&t));
}

// A parameter spec in the fp32 master dtype with dims from a list.
plx_param_spec make_param(const char* name, std::initializer_list<int64_t> dims, uint32_t init,
                          double std_dev, uint32_t flags);

// ---- the base of both layers ----

// One compute stage named after the component, `num_inputs` inputs and one output, no layer
// flags (neither PLX_LAYER_PRODUCES_LOSS nor PLX_LAYER_CONTEXT_PARALLEL). Created only on the
// CPU: anything else is refused by name. Whole on every tp rank under tensor parallelism.
class VisionLayer : public plexus::sdk::Layer {
 public:
  VisionLayer(const char* component, const plx_layer_create_args& args, uint32_t num_inputs);

  plx_layer_info info() const override;
  plx_param_spec param(uint32_t index) const override;
  plx_stage_info stage(uint32_t index) const override;

 protected:
  // The counts of an output_desc / estimate_flops call, and of a forward / backward call (its
  // stage and parameter count too).
  void expect_descs(uint32_t num_inputs, uint32_t num_outputs) const;
  void expect_call(uint32_t stage, uint32_t num_inputs, uint32_t num_outputs, uint32_t num_params) const;
  // Every parameter (and, when grads is not null, every gradient whose data is not null) against
  // its spec's shape, in `dtype`, on the CPU.
  void expect_params(const DLTensor* params, const DLTensor* grads, DLDataType dtype) const;
  // The gradient of parameter i, or null when the caller needs none.
  template <class T>
  static T* grad_or_null(const DLTensor* grads, uint32_t i) {
    return grads != nullptr && grads[i].data != nullptr ? data<T>(grads[i]) : nullptr;
  }
  // Error(PLX_ERR_INVALID_ARGUMENT, "<component>: <message>").
  [[noreturn]] void refuse(const std::string& message) const;
  // Throws unless the state holds a training forward of this precision and shape [batch, seq].
  void expect_saved(bool saved, Precision saved_precision, Precision precision, int64_t saved_batch,
                    int64_t saved_seq, int64_t batch, int64_t seq) const;

  const char* component_;
  DLDevice device_;
  uint32_t num_inputs_;
  int64_t hidden_ = 0;   // model.hidden_size: the encoder's width
  double init_std_ = 0;  // model.init_method_std
  std::vector<plx_param_spec> params_;
};

// ---- the components ----
const plx_component_desc* patch_embedding_component();
const plx_component_desc* projection_component();

}  // namespace plexus::vision

// Plexus SDK C++ helpers: write a layer as an ordinary class, get a plx_layer_v1 table.
//
//   class Scale : public plexus::sdk::Layer { ... };
//   static const plx_component_desc kScale = plexus::sdk::layer_component<Scale>("my.scale", "...");
//
// T must be constructible from `const plx_layer_create_args&`. Per-microbatch data lives in a
// LayerState subclass returned by create_state, never in the layer itself.
#ifndef PLEXUS_CPP_LAYER_HPP
#define PLEXUS_CPP_LAYER_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "plexus/cpp/error.hpp"
#include "plexus/layer.h"
#include "plexus/plugin.h"

namespace plexus::sdk {

class LayerState {
 public:
  virtual ~LayerState() = default;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual plx_layer_info info() const = 0;
  virtual plx_param_spec param(uint32_t index) const {
    throw Error(PLX_ERR_INVALID_ARGUMENT, "no parameter " + std::to_string(index));
  }
  virtual plx_stage_info stage(uint32_t index) const {
    if (index != 0) throw Error(PLX_ERR_INVALID_ARGUMENT, "no stage " + std::to_string(index));
    plx_stage_info s{};
    s.struct_size = sizeof(s);
    s.kind = PLX_STAGE_COMPUTE;
    s.name = "compute";
    return s;
  }
  virtual void output_desc(uint32_t num_inputs, const plx_tensor_desc* inputs,
                           uint32_t num_outputs, plx_tensor_desc* outputs) const = 0;
  virtual void init_param(uint32_t index, DLTensor& /*value*/, uint64_t /*seed*/) {
    throw Error(PLX_ERR_UNSUPPORTED, "parameter " + std::to_string(index) + " has no custom initializer");
  }
  virtual std::unique_ptr<LayerState> create_state(uint32_t /*microbatch*/) {
    return std::make_unique<LayerState>();
  }
  virtual void forward(LayerState& state, uint32_t stage, const plx_forward_args& args) = 0;
  virtual void backward(LayerState& state, uint32_t stage, const plx_backward_args& args) = 0;
  // Weight gradients split from backward (plx_layer_v1.backward_weights): called once per
  // microbatch after its backward stages ran with PLX_BACKWARD_SKIP_WEIGHT_GRADS. A layer that
  // does not override it has no backward_weights in its table, and the host never sets the flag
  // for it.
  virtual void backward_weights(LayerState& /*state*/, const plx_backward_args& /*args*/) {}
  // ABI 1.1: FLOPs of one forward and one backward, for utilization reports. Layers that do not
  // override it report "unknown" (PLX_ERR_UNSUPPORTED), which the host treats as such.
  virtual void estimate_flops(uint32_t /*num_inputs*/, const plx_tensor_desc* /*inputs*/,
                              double& /*forward*/, double& /*backward*/) const {
    throw Error(PLX_ERR_UNSUPPORTED, "no FLOP estimate");
  }
  // ABI 1.10: the bytes a training forward of these inputs keeps in its state for the backward,
  // on a rank of a context-parallel group of query.cp_size ranks (plx_activation_query). Layers
  // that do not override it report "unknown".
  virtual double estimate_activation_bytes(uint32_t /*num_inputs*/, const plx_tensor_desc* /*inputs*/,
                                           const plx_activation_query& /*query*/) const {
    throw Error(PLX_ERR_UNSUPPORTED, "no activation estimate");
  }
  // ABI 1.5: after each optimizer step, with the parameters (writable: a layer updates its
  // PLX_PARAM_BUFFER parameters here). A layer that does not override it has no after_step in
  // its table, and the host makes no call.
  virtual void after_step(const plx_step_args& /*args*/) {}
};

namespace detail {
template <class T>
struct LayerTrampolines {
  static Layer& self(void* layer) { return *static_cast<Layer*>(static_cast<T*>(layer)); }
  static plx_status create(const plx_layer_create_args* args, void** out) noexcept {
    return guard("create", [&] {
      if (args == nullptr || out == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null argument");
      *out = std::make_unique<T>(*args).release();  // owned by the host until destroy()
    });
  }
  static void destroy(void* layer) noexcept { std::unique_ptr<T> owned(static_cast<T*>(layer)); }
  static plx_status get_info(void* layer, plx_layer_info* out) noexcept {
    return guard("get_info", [&] { write_out(out, self(layer).info()); });
  }
  static plx_status get_param(void* layer, uint32_t index, plx_param_spec* out) noexcept {
    return guard("get_param", [&] { write_out(out, self(layer).param(index)); });
  }
  static plx_status get_stage(void* layer, uint32_t index, plx_stage_info* out) noexcept {
    return guard("get_stage", [&] { write_out(out, self(layer).stage(index)); });
  }
  static plx_status output_desc(void* layer, uint32_t ni, const plx_tensor_desc* in, uint32_t no,
                                plx_tensor_desc* out) noexcept {
    return guard("output_desc", [&] { self(layer).output_desc(ni, in, no, out); });
  }
  static plx_status init_param(void* layer, uint32_t index, DLTensor* value, uint64_t seed) noexcept {
    return guard("init_param", [&] { self(layer).init_param(index, *value, seed); });
  }
  static plx_status state_create(void* layer, uint32_t microbatch, void** out) noexcept {
    return guard("state_create", [&] { *out = self(layer).create_state(microbatch).release(); });
  }
  static void state_destroy(void* /*layer*/, void* state) noexcept {
    std::unique_ptr<LayerState> owned(static_cast<LayerState*>(state));
  }
  static plx_status forward(void* layer, void* state, uint32_t stage, const plx_forward_args* args) noexcept {
    return guard("forward", [&] { self(layer).forward(*static_cast<LayerState*>(state), stage, *args); });
  }
  static plx_status backward(void* layer, void* state, uint32_t stage, const plx_backward_args* args) noexcept {
    return guard("backward", [&] { self(layer).backward(*static_cast<LayerState*>(state), stage, *args); });
  }
  static plx_status backward_weights(void* layer, void* state, const plx_backward_args* args) noexcept {
    return guard("backward_weights", [&] {
      if (args == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null argument");
      self(layer).backward_weights(*static_cast<LayerState*>(state), *args);
    });
  }
  static plx_status estimate_flops(void* layer, uint32_t ni, const plx_tensor_desc* in, double* fwd,
                                   double* bwd) noexcept {
    try {
      self(layer).estimate_flops(ni, in, *fwd, *bwd);
      return PLX_OK;
    } catch (const Error& e) {
      // "Unknown" is an answer, not a failure: no message for the host to show.
      if (e.status() == PLX_ERR_UNSUPPORTED) return PLX_ERR_UNSUPPORTED;
      return guard("estimate_flops", [&] { throw; });
    } catch (...) {
      return guard("estimate_flops", [&] { throw; });
    }
  }
  static plx_status estimate_activation_bytes(void* layer, uint32_t ni, const plx_tensor_desc* in,
                                              const plx_activation_query* query, double* bytes) noexcept {
    try {
      if (query == nullptr || bytes == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null argument");
      plx_activation_query q{};  // the fields the caller's struct predates read as zero
      q.struct_size = sizeof(q);
      q.cp_size =
          PLX_HAS_FIELD(query, plx_activation_query, cp_size) && query->cp_size > 0 ? query->cp_size : 1;
      *bytes = self(layer).estimate_activation_bytes(ni, in, q);
      return PLX_OK;
    } catch (const Error& e) {
      if (e.status() == PLX_ERR_UNSUPPORTED) return PLX_ERR_UNSUPPORTED;  // "unknown", no message
      return guard("estimate_activation_bytes", [&] { throw; });
    } catch (...) {
      return guard("estimate_activation_bytes", [&] { throw; });
    }
  }
  static plx_status after_step(void* layer, const plx_step_args* args) noexcept {
    return guard("after_step", [&] {
      if (args == nullptr) throw Error(PLX_ERR_INVALID_ARGUMENT, "null argument");
      self(layer).after_step(*args);
    });
  }
  // Only a layer that overrides after_step gets one in its table, so the host knows which layers
  // need the call (a pointer to a member that T only inherits has Layer as its class).
  static constexpr bool kHasAfterStep =
      !std::is_same_v<decltype(&T::after_step), void (Layer::*)(const plx_step_args&)>;
  // Likewise backward_weights: the host splits weight gradients only for a layer that has it.
  static constexpr bool kHasBackwardWeights =
      !std::is_same_v<decltype(&T::backward_weights), void (Layer::*)(LayerState&, const plx_backward_args&)>;
  static inline const plx_layer_v1 table = {sizeof(plx_layer_v1),
                                            0,
                                            &create,
                                            &destroy,
                                            &get_info,
                                            &get_param,
                                            &get_stage,
                                            &output_desc,
                                            &init_param,
                                            &state_create,
                                            &state_destroy,
                                            &forward,
                                            &backward,
                                            kHasBackwardWeights ? &backward_weights : nullptr,
                                            &estimate_flops,
                                            kHasAfterStep ? &after_step : nullptr,
                                            &estimate_activation_bytes};
};
}  // namespace detail

template <class T>
plx_component_desc layer_component(const char* name, const char* description,
                                   const char* config_schema = nullptr) {
  return plx_component_desc{sizeof(plx_component_desc), PLX_KIND_LAYER, name, description,
                            config_schema, &detail::LayerTrampolines<T>::table};
}

// Fills a plx_param_spec with the common fields; adjust flags/init after.
inline plx_param_spec param_spec(const char* name, std::initializer_list<int64_t> dims,
                                 uint32_t init, double init_a = 0.0, uint32_t flags = 0) {
  plx_param_spec p{};
  p.struct_size = sizeof(p);
  p.flags = flags;
  p.name = name;
  p.desc.dtype = plx_dtype_f32();
  for (int64_t d : dims) p.desc.dims[p.desc.ndim++] = d;
  p.init = init;
  p.init_a = init_a;
  return p;
}

}  // namespace plexus::sdk

#endif  // PLEXUS_CPP_LAYER_HPP

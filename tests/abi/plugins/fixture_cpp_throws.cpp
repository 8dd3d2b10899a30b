// fixture_cpp_throws: a C++ layer ("fixture.throws") whose forward throws a plain
// std::runtime_error. Everything else is valid, so the plugin loads and the layer can be created.
//
// Exercises the exception barrier: the SDK's trampolines must catch the exception inside the
// plugin, report its message through set_error and return a status, and the host must turn that
// into a plexus::ComponentCallError naming the component and plugin. An exception that crossed
// the C boundary instead would terminate the test.
#include <stdexcept>

#include "plexus/cpp/plugin.hpp"

namespace {

class Throws : public plexus::sdk::Layer {
 public:
  explicit Throws(const plx_layer_create_args& /*args*/) {}

  plx_layer_info info() const override {
    plx_layer_info info{};
    info.struct_size = sizeof(info);
    info.num_stages = 1;
    info.num_inputs = 1;
    info.num_outputs = 1;
    return info;
  }
  void output_desc(uint32_t /*num_inputs*/, const plx_tensor_desc* inputs, uint32_t /*num_outputs*/,
                   plx_tensor_desc* outputs) const override {
    outputs[0] = inputs[0];
  }
  void forward(plexus::sdk::LayerState& /*state*/, uint32_t /*stage*/, const plx_forward_args& /*args*/) override {
    throw std::runtime_error("fixture forward exploded");
  }
  void backward(plexus::sdk::LayerState& /*state*/, uint32_t /*stage*/, const plx_backward_args& /*args*/) override {}
};

const plx_component_desc kThrows =
    plexus::sdk::layer_component<Throws>("fixture.throws", "a layer whose forward throws");

}  // namespace

PLEXUS_PLUGIN("fixture_cpp_throws", "0.3.0", "A C++ plugin whose layer throws in forward", &kThrows)

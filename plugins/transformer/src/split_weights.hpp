// Weight gradients split from backward (PLX_BACKWARD_SKIP_WEIGHT_GRADS, then backward_weights),
// shared by attention and MLP: the calls' order is checked here; the layer computes (the pre-norm
// and the projections in prenorm_layer.hpp, the same calls split or not).
//
// With the flag, a layer's run_backward computes the input gradient only and keeps in its state
// the operands of every weight gradient it left out; run_backward_weights<T> later adds those
// gradients with the same calls (same operands, same order of sums) as the unsplit backward, so
// splitting changes no bit. The CUDA path has no split yet and refuses the flag by name.
#pragma once

#include <string>

#include "common.hpp"

namespace plexus::transformer {

inline bool skips_weight_grads(const plx_backward_args& args) {
  return (args.flags & PLX_BACKWARD_SKIP_WEIGHT_GRADS) != 0;
}

// Derived (CRTP) adds to what HiddenLayer asks of it
//   template <class T> void run_backward_weights(State&, const plx_backward_args&);
// which also releases what the state kept for it. State has `bool weights_due`: a backward left
// the weight gradients out and backward_weights is still to come.
template <class Derived, class State>
class SplitHiddenLayer : public HiddenLayer<Derived, State> {
  using Base = HiddenLayer<Derived, State>;

 public:
  using Base::Base;

  // A forward over a state whose weight gradients are still due would overwrite what they need.
  void forward(plexus::sdk::LayerState& state, uint32_t stage, const plx_forward_args& args) override {
    if (!this->device_impl_ && static_cast<State&>(state).weights_due)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(this->component_) + ": forward of microbatch " +
                                                std::to_string(args.microbatch) +
                                                " before backward_weights of its previous backward");
    Base::forward(state, stage, args);
  }

  void backward(plexus::sdk::LayerState& state, uint32_t stage, const plx_backward_args& args) override {
    const bool skip = skips_weight_grads(args);
    if (skip && this->device_impl_) refuse_on_device();
    if (this->device_impl_) return Base::backward(state, stage, args);
    auto& st = static_cast<State&>(state);
    if (st.weights_due)
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string(this->component_) + ": backward of microbatch " +
                                                std::to_string(args.microbatch) +
                                                " again before backward_weights of the previous one");
    Base::backward(state, stage, args);
    st.weights_due = skip;
  }

  void backward_weights(plexus::sdk::LayerState& state, const plx_backward_args& args) override {
    if (this->device_impl_) refuse_on_device();
    auto& st = static_cast<State&>(state);
    if (!st.weights_due)
      throw Error(PLX_ERR_INVALID_ARGUMENT,
                  std::string(this->component_) + ": backward_weights of microbatch " +
                      std::to_string(args.microbatch) +
                      " without a backward that left them out (PLX_BACKWARD_SKIP_WEIGHT_GRADS)");
    if (args.num_params != this->params_.size())
      throw Error(PLX_ERR_INVALID_ARGUMENT, std::string("backward_weights: ") + this->component_ + " has " +
                                                std::to_string(this->params_.size()) + " parameters, got " +
                                                std::to_string(args.num_params));
    auto& self = static_cast<Derived&>(*this);
    // The precision of the backward that left them out: backward_weights carries no activations.
    if (st.precision == Precision::f32) {
      this->expect_params(args.params, args.param_grads, plx_dtype_f32());
      self.template run_backward_weights<float>(st, args);
    } else {
      this->expect_params(args.params, args.param_grads, plx_dtype_f64());
      self.template run_backward_weights<double>(st, args);
    }
    st.weights_due = false;
  }

 private:
  [[noreturn]] void refuse_on_device() const {
    throw Error(
        PLX_ERR_UNSUPPORTED,
        std::string(this->component_) + " on " + device_text(this->device_) +
            ": weight gradients split from backward (PLX_BACKWARD_SKIP_WEIGHT_GRADS, backward_weights) "
            "are not built for CUDA; run the scheduler without delayed weight gradients "
            "(scheduler.options.delay_weight_gradients = false)");
  }
};

}  // namespace plexus::transformer
